"""Metrics on hand-made success matrices; expected values worked out by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memrl.cli.metrics import main as metrics_main
from memrl.core.records import EpisodeRecord, append_jsonl
from memrl.core.rundir import RunDir
from memrl.metrics.compute import (compute_metrics, csr, csr_curve, forgetting_curve, forgetting_mean, last, load_run,
                                   retrieval_by_epoch, sr_curve, success_matrix, zero_fail_epochs)

REPO = Path(__file__).resolve().parents[2]

# Rows are epochs 1..3, columns tasks t0..t2.
S3 = np.array(
    [
        [1, 0, 0],  # epoch 1: t0 solved
        [1, 1, 0],  # epoch 2: t0, t1 solved
        [0, 1, 1],  # epoch 3: t1, t2 solved; t0 forgotten
    ]
)


def rec(task: str, epoch: int, success: bool, **kw) -> EpisodeRecord:
    return EpisodeRecord(epoch=epoch, batch=0, task_id=task, intent=task, success=success, reward=float(success),
                         steps=1, **kw)


def records_from(S: np.ndarray) -> list[EpisodeRecord]:
    return [rec(f"t{i}", t + 1, bool(S[t, i])) for t in range(S.shape[0]) for i in range(S.shape[1])]


def test_curves_on_hand_matrix() -> None:
    # SR: epoch1 1/3, epoch2 2/3, epoch3 2/3
    assert sr_curve(S3) == pytest.approx([1 / 3, 2 / 3, 2 / 3])
    assert last(S3) == pytest.approx(2 / 3)
    # ever solved: after e1 {t0}=1/3, after e2 {t0,t1}=2/3, after e3 all=1
    assert csr_curve(S3) == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert csr(S3) == pytest.approx(1.0)
    # FR_2: zeros at e2 = {t2}; none of them was 1 at e1 -> 0/1 = 0
    # FR_3: zeros at e3 = {t0}; t0 was 1 at e2 -> 1/1 = 1
    assert forgetting_curve(S3) == pytest.approx([0.0, 1.0])
    assert forgetting_mean(S3) == pytest.approx(0.5)


def test_forgetting_partial_and_zero_denominator() -> None:
    S = np.array(
        [
            [1, 1, 1, 0],
            [1, 0, 0, 0],  # zeros {t1,t2,t3}; previously 1: {t1,t2} -> 2/3
            [1, 1, 1, 1],  # no zeros -> defined as 0
        ]
    )
    assert forgetting_curve(S) == pytest.approx([2 / 3, 0.0])
    assert forgetting_mean(S) == pytest.approx(1 / 3)


def test_single_epoch_has_no_forgetting() -> None:
    S = np.array([[1, 0]])
    assert forgetting_curve(S) == []
    assert forgetting_mean(S) is None
    m = compute_metrics(records_from(S))
    assert m["forgetting"] == [] and m["forgetting_mean"] is None
    assert m["last"] == pytest.approx(0.5) and m["csr"] == pytest.approx(0.5)


def test_success_matrix_sorts_tasks_and_epochs() -> None:
    recs = list(reversed(records_from(S3)))
    recs = [r for r in recs if r.task_id != "t1"] + [r for r in recs if r.task_id == "t1"]
    tasks, epochs, S = success_matrix(recs)
    assert tasks == ["t0", "t1", "t2"]
    assert epochs == [1, 2, 3]
    assert S.shape == (3, 3)
    np.testing.assert_array_equal(S, S3)


def test_compute_metrics_keys_and_values() -> None:
    recs = records_from(S3)
    recs[0].tokens = {"prompt": 10, "completion": 3}
    recs[1].tokens = {"prompt": 5, "completion": 2}
    recs[1].errors = ["timeout"]
    recs[2].llm_calls, recs[2].cache_hits = 4, 1
    recs[3].llm_calls = 2
    m = compute_metrics(recs)
    assert set(m) == {
        "sr", "last", "csr", "csr_curve", "forgetting", "forgetting_mean", "n_tasks", "epochs",
        "n_episodes", "errored_episodes", "tokens", "llm_calls", "missing_cells", "outcomes",
        "outcome_details", "forgetting_zero_fail", "forgetting_zero_fail_epochs",
        "forgetting_mean_by_reading", "retrieval", "staleness", "utility",
    }
    assert m["staleness"] is None  # these records carry none
    assert m["sr"] == pytest.approx([1 / 3, 2 / 3, 2 / 3])
    assert m["last"] == pytest.approx(2 / 3)
    assert m["csr"] == pytest.approx(1.0)
    assert m["csr_curve"] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert m["forgetting"] == pytest.approx([0.0, 1.0])
    assert m["forgetting_mean"] == pytest.approx(0.5)
    assert (m["n_tasks"], m["epochs"], m["n_episodes"]) == (3, 3, 9)
    assert m["errored_episodes"] == 1
    assert m["tokens"] == {"prompt": 15, "completion": 5}
    assert m["llm_calls"] == 6
    assert m["missing_cells"] == []
    json.dumps(m)  # must be JSON-serialisable (no numpy scalars)
    assert all(type(x) is float for x in m["sr"] + m["csr_curve"] + m["forgetting"])


def test_duplicate_records_in_epoch_count_as_any() -> None:
    # t0 epoch 1: fail, success, fail -> 1; t1 epoch 1: fail, fail -> 0
    recs = [rec("t0", 1, False), rec("t0", 1, True), rec("t0", 1, False), rec("t1", 1, False), rec("t1", 1, False)]
    _, _, S = success_matrix(recs)
    np.testing.assert_array_equal(S, [[1, 0]])
    m = compute_metrics(recs)
    assert m["sr"] == pytest.approx([0.5])
    assert m["n_episodes"] == 5 and m["n_tasks"] == 2


def test_missing_cells_raise_or_zero() -> None:
    recs = [r for r in records_from(S3) if not (r.task_id == "t1" and r.epoch == 2)]
    with pytest.raises(ValueError, match=r"t1@epoch2"):
        success_matrix(recs)
    with pytest.raises(ValueError):
        compute_metrics(recs)
    _, _, S = success_matrix(recs, allow_missing=True)
    assert S[1, 1] == 0 and S[1, 0] == 1
    m = compute_metrics(recs, allow_missing=True)
    assert m["missing_cells"] == [["t1", 2]]
    assert m["sr"][1] == pytest.approx(1 / 3)


def test_wholly_missing_epoch_is_missing() -> None:
    recs = [r for r in records_from(S3) if r.epoch != 2]
    with pytest.raises(ValueError, match="3 missing"):
        success_matrix(recs)


def test_empty_records_raise() -> None:
    with pytest.raises(ValueError):
        compute_metrics([])


def _write_run(run_dir: Path) -> None:
    append_jsonl(RunDir(run_dir).episodes, [r.to_json() for r in records_from(S3)])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), MPLBACKEND="Agg")
    return subprocess.run(
        [sys.executable, "-m", "memrl.cli", "metrics", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_load_run_round_trip(tmp_path: Path) -> None:
    _write_run(tmp_path)
    recs = load_run(tmp_path)
    assert len(recs) == 9
    np.testing.assert_array_equal(success_matrix(recs)[2], S3)


def test_cli_writes_metrics_and_plots(tmp_path: Path) -> None:
    _write_run(tmp_path)
    p = _cli(str(tmp_path))
    assert p.returncode == 0, p.stderr
    on_disk = json.loads(RunDir(tmp_path).metrics.read_text())
    # a summary a person reads first; every figure with --json
    assert p.stdout.splitlines()[1].startswith("SR per epoch: 1: ") and len(p.stdout.splitlines()) < 10
    assert f"Last {on_disk['last']:.3f}   CSR {on_disk['csr']:.3f}" in p.stdout
    p = _cli(str(tmp_path), "--json", "--no-plots")
    printed = json.loads(p.stdout)
    assert printed == on_disk
    assert on_disk["forgetting_mean"] == pytest.approx(0.5)
    assert on_disk["csr"] == pytest.approx(1.0)
    for name in ("sr.png", "csr.png", "forgetting.png"):
        png = RunDir(tmp_path).plots / name
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_no_plots(tmp_path: Path) -> None:
    _write_run(tmp_path)
    p = _cli(str(tmp_path), "--no-plots")
    assert p.returncode == 0, p.stderr
    assert RunDir(tmp_path).metrics.is_file()
    assert not RunDir(tmp_path).plots.exists()


def test_cli_missing_dir_exits_2(tmp_path: Path) -> None:
    p = _cli(str(tmp_path / "nope"))
    assert p.returncode == 2
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and RunDir.EPISODES in p.stderr


def test_cli_missing_episodes_file_exits_2(tmp_path: Path) -> None:
    p = _cli(str(tmp_path))
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1
    assert not RunDir(tmp_path).metrics.exists()


def test_outcomes_are_counted_per_epoch_in_the_shared_vocabulary() -> None:
    from memrl.metrics.compute import outcome_counts

    def r(task: str, epoch: int, outcome: str, detail: str = "", **kw) -> EpisodeRecord:
        return EpisodeRecord(epoch=epoch, batch=0, task_id=task, intent=task, success=outcome == "success",
                             reward=0.0, steps=1, outcome=outcome, outcome_detail=detail, **kw)

    records = [r("a", 1, "success", "pass"), r("b", 1, "env_error", "env_error"),
               r("c", 1, "failure", "syntax_error"), r("a", 2, "timeout", "timeout"),
               r("b", 2, "success", "pass"), r("c", 2, "llm_error")]
    assert outcome_counts(records) == {"1": {"env_error": 1, "failure": 1, "success": 1},
                                       "2": {"llm_error": 1, "success": 1, "timeout": 1}}
    assert outcome_counts(records, "outcome_detail") == {"1": {"env_error": 1, "pass": 1, "syntax_error": 1},
                                                         "2": {"pass": 1, "timeout": 1}}
    m = compute_metrics(records)
    assert m["outcomes"]["1"]["failure"] == 1 and m["outcome_details"]["1"]["syntax_error"] == 1
    # the info dict is not where outcomes are read from any more
    assert outcome_counts([r("a", 1, "failure", info={"outcome": "pass"})]) == {"1": {"failure": 1}}
    with pytest.raises(ValueError, match="not one of"):
        r("a", 1, "crashed")
    with pytest.raises(ValueError, match="contradicts success"):
        EpisodeRecord(epoch=1, batch=0, task_id="a", intent="a", success=True, reward=1.0, steps=1,
                      outcome="failure")


def test_old_records_without_an_outcome_stay_readable(tmp_path) -> None:
    """Records written before the shared vocabulary: env names in info["outcome"] (or none,
    ALFWorld) are mapped; what is left is derived from success and errors."""
    import json

    from memrl.core.records import read_episodes

    rows = [({"success": True, "info": {"outcome": "pass"}}, ("success", "pass")),
            ({"success": False, "info": {"outcome": "syntax_error"}}, ("failure", "syntax_error")),
            ({"success": False, "info": {"outcome": "solver_error"}, "errors": ["solver_error: x"]},
             ("llm_error", "solver_error")),
            ({"success": False, "info": {"outcome": "eval_timeout"}}, ("timeout", "eval_timeout")),
            ({"success": False, "info": {"outcome": "unsupported_input"}, "errors": ["x"]},
             ("env_error", "unsupported_input")),
            ({"success": False, "info": {"outcome": "judge_error"}, "errors": ["x"]}, ("judge_error", "judge_error")),
            ({"success": True, "info": {"task_type": "put"}}, ("success", "")),  # ALFWorld
            ({"success": False, "info": {}}, ("failure", "")),
            ({"success": False, "errors": ["LLMError at step 3: down"]}, ("llm_error", "")),
            ({"success": False, "errors": ["env crash: KeyError: 'x'"]}, ("env_error", "")),
            ({"success": False, "info": {"outcome": "pass"}}, ("failure", "pass"))]  # contradicts: success wins
    path = RunDir(tmp_path).episodes
    path.write_text("".join(json.dumps({"epoch": 1, "batch": 0, "task_id": f"t{i}", "intent": "x",
                                        "reward": 0.0, "steps": 1, **row}) + "\n"
                            for i, (row, _) in enumerate(rows)))
    recs = read_episodes(path)
    assert [(r.outcome, r.outcome_detail) for r in recs] == [want for _, want in rows]
    assert compute_metrics(recs)["outcomes"]["1"]["llm_error"] == 2


# ------------------------------------------------------- forgetting at 0/0, retrieval readings
S_ZERO = np.array(
    [
        [1, 1, 0],
        [1, 0, 0],  # zeros {t1, t2}; t1 was solved -> 1/2
        [1, 1, 1],  # no failure: 0/0
        [0, 1, 1],  # zeros {t0}; t0 was solved -> 1/1
    ]
)


def test_forgetting_zero_fail_readings() -> None:
    assert zero_fail_epochs(S_ZERO) == 1
    assert forgetting_curve(S_ZERO, "zero") == pytest.approx([0.5, 0.0, 1.0])
    assert forgetting_curve(S_ZERO, "skip")[1] is None
    assert forgetting_mean(S_ZERO, "zero") == pytest.approx(1.5 / 3)  # the 0/0 epoch pulls it down
    assert forgetting_mean(S_ZERO, "skip") == pytest.approx(1.5 / 2)
    assert forgetting_mean(np.array([[0, 1], [1, 1]]), "skip") is None  # nothing left to average
    with pytest.raises(ValueError, match="forgetting_zero_fail"):
        forgetting_curve(S_ZERO, "nan")  # type: ignore[arg-type]
    m = compute_metrics(records_from(S_ZERO), zero_fail="skip")
    assert m["forgetting_zero_fail"] == "skip" and m["forgetting_zero_fail_epochs"] == 1
    assert m["forgetting"][1] is None and m["forgetting_mean"] == pytest.approx(0.75)
    assert m["forgetting_mean_by_reading"] == pytest.approx({"zero": 0.5, "skip": 0.75})
    assert compute_metrics(records_from(S_ZERO))["forgetting_zero_fail"] == "zero"  # the default
    json.dumps(m)


def test_metrics_cli_takes_the_reading(tmp_path: Path, capsys) -> None:
    rd = RunDir(tmp_path)
    append_jsonl(rd.episodes, [r.to_json() for r in records_from(S_ZERO)])
    assert metrics_main([str(tmp_path), "--no-plots", "--forgetting-zero-fail", "skip"]) == 0
    on_disk = json.loads(rd.metrics.read_text())
    assert on_disk["forgetting_mean"] == pytest.approx(0.75) and on_disk["forgetting"][1] is None
    assert metrics_main([str(tmp_path)]) == 0  # plots with a gap are fine too
    assert (rd.plots / "forgetting.png").is_file()
    capsys.readouterr()


def test_retrieval_saturation_per_epoch() -> None:
    def r(task, epoch, pool, own):
        return rec(task, epoch, False, info={"retrieval": {"pool": pool, "own_only": own}})

    recs = [r("t0", 1, 0, False), r("t1", 1, 2, False), r("t2", 1, 4, False),
            r("t0", 2, 3, True), r("t1", 2, 3, True), r("t2", 2, 6, False),
            rec("t9", 2, True)]  # a record without retrieval info (e.g. a carried task) is ignored
    got = retrieval_by_epoch(recs)
    assert got["1"] == {"retrievals": 3, "empty": 1, "mean_pool": pytest.approx(2.0), "own_only_share": 0.0}
    assert got["2"] == {"retrievals": 3, "empty": 0, "mean_pool": pytest.approx(4.0),
                        "own_only_share": pytest.approx(2 / 3)}
    assert retrieval_by_epoch([r("t0", 1, 0, False)])["1"]["own_only_share"] is None  # no pool at all
    assert retrieval_by_epoch(records_from(S3)) == {}  # modules that record nothing
    assert compute_metrics(recs[:6])["retrieval"] == got


def test_staleness_distribution_of_the_records_that_carry_it() -> None:
    from memrl.metrics.compute import staleness_stats

    recs = records_from(S3)
    for i, r in enumerate(recs):
        r.staleness = [0, 1, 2, 3, 0, 31][i % 6] if i != 4 else None  # one old record among them
    values = sorted(r.staleness for r in recs if r.staleness is not None)
    st = staleness_stats(recs)
    assert st["max"] == max(values) and st["mean"] == pytest.approx(sum(values) / len(values))
    assert sum(st["counts"].values()) == len(values) == len(recs) - 1
    assert st["counts"]["0"] == values.count(0)


def test_the_95_percent_normal_quantile_is_scipys_to_the_bit_without_importing_scipy() -> None:
    from scipy.stats import norm

    from memrl.metrics.compute import Z_975, z_quantile

    assert Z_975 == float(norm.ppf(0.975)) and z_quantile(0.5 + 0.95 / 2) == Z_975
    assert z_quantile(0.95) == float(norm.ppf(0.95))  # other levels: scipy itself
    # a run's metrics and plots (95% Wilson intervals) never import scipy
    code = ("import sys; from memrl.metrics.compute import wilson; wilson(3, 4); "
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
