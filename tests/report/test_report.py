"""The cross-run report (memrl/report/, scripts/report.py) on hand-written run directories,
checked against numbers computed by hand; plus the wandb epoch logger and the sweep configs."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from memrl import report as R
from memrl.core.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
TASKS = ["t0", "t1", "t2", "t3"]

# Success matrices S[epoch][task], 3 epochs x 4 tasks, written by hand.
MATRICES = {
    ("memrl", 0): [[0, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]],  # Last 3/4, CSR 3/4
    ("memrl", 1): [[0, 0, 0, 0], [0, 1, 1, 0], [1, 1, 0, 0]],  # Last 2/4, CSR 3/4
    ("none", 0): [[1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]],   # Last 1/4, CSR 2/4
    ("none", 1): [[0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]],   # Last 0/4, CSR 1/4
}
T975_DF1 = 12.706204736174698  # t(0.975, 1)


def injected(memory: str, epoch: int, task: str) -> list[dict]:
    """MemRL episodes: epoch 1 nothing, epoch 2 one memory with Q=-0.5, epoch 3 Q=+0.5
    (task t3 of epoch 3: two memories, Q 0.2 and 0.8, mean 0.5)."""
    if memory != "memrl" or epoch == 1:
        return []
    if epoch == 2:
        return [{"id": "m1", "q": -0.5, "sim": 0.9, "score": 0.1}]
    if task == "t3":
        return [{"id": "m1", "q": 0.2, "sim": 0.9, "score": 0.1},
                {"id": "m2", "q": 0.8, "sim": 0.8, "score": 0.2}]
    return [{"id": "m1", "q": 0.5, "sim": 0.9, "score": 0.1}]


def write_run(d: Path, *, memory: str, seed: int, S: list[list[int]], lam: float = 0.5,
              mode: str | None = None, tasks: list[str] = TASKS, info: dict | None = None,
              skip: set[tuple[str, int]] = frozenset(), eval_S: list[list[int]] | None = None) -> Path:
    d.mkdir(parents=True)
    mem_cfg = {"name": memory, "_target_": f"x.{memory}"}
    if memory == "memrl":
        mem_cfg.update(lam=lam, alpha=0.3, k1=5, k2=3)
    runner = {"epochs": len(S), "batch_size": 1, "progress": seed == 0}
    if mode:
        runner["mode"] = mode
    config = {"env": {"name": "alfworld", "split": "valid_seen", "max_tasks": len(tasks),
                      "cache_dir": f"/cache/{d.name}"},
              "memory": mem_cfg, "runner": runner, "seed": seed,
              "paths": {"cache_dir": f"/somewhere/{d.name}"}}
    RunDir(d).card.write_text(json.dumps({"config": config, "status": "finished"}))
    lines = []
    for e, row in enumerate(S, start=1):
        for i, (t, ok) in enumerate(zip(tasks, row)):
            if (t, e) in skip:
                continue
            rec = {"epoch": e, "batch": i, "task_id": t, "intent": f"do {t}", "success": bool(ok),
                   "reward": float(ok), "steps": 3, "injected": injected(memory, e, t),
                   "tokens": {"prompt": 10, "completion": 2}, "llm_calls": 1, "errors": [],
                   "transcript": [], "info": dict(info or {}), "seed": seed}
            lines.append(json.dumps(rec))
    RunDir(d).episodes.write_text("\n".join(lines) + "\n")
    if eval_S is not None:  # transfer: held-out evaluation after each epoch, as the runner writes it
        rows = [json.dumps({"epoch": e, "batch": i, "task_id": f"v{i}", "intent": f"v{i}", "success": bool(ok),
                            "reward": float(ok), "steps": 1, "seed": seed})
                for e, row in enumerate(eval_S, start=1) for i, ok in enumerate(row)]
        RunDir(d).eval_episodes.write_text("\n".join(rows) + "\n")
    return d


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# --------------------------------------------------------------------------- statistics
def test_t_interval_by_hand():
    m, lo, hi = R.t_interval([0.75, 0.5])
    sd = math.sqrt(((0.75 - 0.625) ** 2 + (0.5 - 0.625) ** 2) / 1)
    half = T975_DF1 * sd / math.sqrt(2)
    assert m == pytest.approx(0.625)
    assert (lo, hi) == pytest.approx((0.625 - half, 0.625 + half), rel=1e-6)
    assert R.t_interval([0.4])[0] == 0.4 and math.isnan(R.t_interval([0.4])[1])
    assert R.t_interval([0.3, 0.3, 0.3]) == pytest.approx((0.3, 0.3, 0.3))


def test_mcnemar_exact_and_chi2_by_hand():
    # hand-made table: b = 1, c = 8 -> p = 2 * (C(9,0) + C(9,1)) / 2^9 = 20/512
    r = R.mcnemar(1, 8)
    assert r["test"] == "exact" and r["n_discordant"] == 9
    assert r["p"] == pytest.approx(20 / 512)
    assert R.mcnemar(4, 0)["p"] == pytest.approx(2 / 16)
    assert R.mcnemar(3, 3)["p"] == 1.0  # capped at 1
    assert R.mcnemar(0, 0)["p"] == 1.0
    # many discordant pairs: chi-square with continuity correction, 1 df
    r = R.mcnemar(30, 10)
    assert r["test"] == "chi2-cc"
    assert r["statistic"] == pytest.approx(19 ** 2 / 40)
    from scipy.stats import chi2
    assert r["p"] == pytest.approx(float(chi2.sf(19 ** 2 / 40, 1)))


def test_paired_bootstrap():
    a, b = [1, 1, 0.5, 0], [0, 0.5, 0, 0]
    est, lo, hi = R.paired_bootstrap(a, b, n_boot=2000, seed=3)
    assert est == pytest.approx(0.5)
    assert lo <= est <= hi and lo >= 0 and hi <= 1
    assert (est, lo, hi) == R.paired_bootstrap(a, b, n_boot=2000, seed=3)  # seeded
    # constant differences: a degenerate interval at the difference
    assert R.paired_bootstrap([1, 1, 1], [0, 0, 0], n_boot=100) == pytest.approx((1, 1, 1))
    with pytest.raises(ValueError):
        R.paired_bootstrap([], [])


# --------------------------------------------------------------------------- runs and groups
def test_find_and_group_runs(runs_dir: Path):
    dirs = R.find_runs([runs_dir])
    assert len(dirs) == 4 and all(RunDir(d).episodes.is_file() for d in dirs)
    groups = R.group_runs([R.load_run(d) for d in dirs])
    # paths.cache_dir, env.cache_dir and runner.progress differ but are not swept keys
    assert [(g.memory, g.params, g.seeds) for g in groups] == [("memrl", (), [0, 1]), ("none", (), [0, 1])]


def test_incomplete_last_epoch_is_cut(tmp_path: Path):
    run = write_run(tmp_path / "r", memory="none", seed=0, S=MATRICES[("none", 0)], skip={("t3", 3)})
    r = R.load_run(run)
    assert r.epochs == [1, 2] and r.S.shape == (2, 4)
    assert any("incomplete" in w for w in r.warnings)


def test_report_numbers_against_hand(runs_dir: Path, tmp_path: Path):
    out = tmp_path / "out"
    files = R.write_report([runs_dir], out, n_boot=2000, seed=0, warn=lambda m: None)
    for name in ["table1.md", "table1.csv", "comparisons.md", "comparisons.csv", "curves_alfworld.png",
                 "forgetting_alfworld.png", "q_calibration.png", "q_calibration.csv",
                 "q_hist_alfworld_memrl_seed0.png", "q_hist_alfworld_memrl_seed1.png", "report.json"]:
        assert name in files, name
        assert files[name].is_file() and files[name].stat().st_size > 0, name
    assert "lambda.png" not in files and "topk_grid.png" not in files and "table2.md" not in files

    t1 = {r["method"]: r for r in read_csv(out / "table1.csv")}
    mem, non = t1["memrl"], t1["none"]
    assert (mem["n_tasks"], mem["n_seeds"], mem["epochs"]) == ("4", "2", "3")
    # Last: memrl (3/4 + 2/4)/2, none (1/4 + 0)/2; CSR: memrl (3/4 + 3/4)/2, none (2/4 + 1/4)/2
    assert float(mem["last_mean"]) == pytest.approx(0.625)
    assert float(non["last_mean"]) == pytest.approx(0.125)
    assert float(mem["csr_mean"]) == pytest.approx(0.75)
    assert float(non["csr_mean"]) == pytest.approx(0.375)
    # interval centres are the means; memrl's CSR has no spread across seeds
    for row, key in [(mem, "last"), (non, "last"), (non, "csr")]:
        lo, hi = float(row[f"{key}_lo"]), float(row[f"{key}_hi"])
        assert (lo + hi) / 2 == pytest.approx(float(row[f"{key}_mean"]))
        assert hi > lo
    half = T975_DF1 * 0.125  # sd/√n = |0.75-0.5|/√2/√2 = 0.125
    assert float(mem["last_hi"]) - 0.625 == pytest.approx(half, rel=1e-6)
    assert float(mem["csr_lo"]) == pytest.approx(0.75) and float(mem["csr_hi"]) == pytest.approx(0.75)
    # forgetting, memrl seed 0: FR_2 = 0/2, FR_3 = 0/1 -> 0; seed 1: FR_2 = 0/2, FR_3 = 1/2 (t2) -> 0.25
    assert float(mem["forgetting_mean"]) == pytest.approx(0.125)
    md = (out / "table1.md").read_text()
    assert "| alfworld | memrl | 4 | 2 | 3 | 0.625 [" in md

    (cmp,) = read_csv(out / "comparisons.csv")
    assert (cmp["reference"], cmp["method"], cmp["n_tasks"]) == ("memrl", "none", "4")
    # per-task seed-mean final success: memrl (1, 1, .5, 0), none (0, .5, 0, 0) -> Δ = 0.5
    assert float(cmp["delta"]) == pytest.approx(0.5)
    assert float(cmp["delta_lo"]) <= 0.5 <= float(cmp["delta_hi"])
    # McNemar over (task, seed): seed 0 memrl 1110 vs none 0100, seed 1 1100 vs 0000
    assert (cmp["ref_only"], cmp["method_only"], cmp["both_solved"], cmp["neither"]) == ("4", "0", "1", "3")
    assert cmp["mcnemar_test"] == "exact"
    assert float(cmp["mcnemar_p"]) == pytest.approx(2 * 0.5 ** 4)

    q = read_csv(out / "q_calibration.csv")
    bin_of = {r["bin"]: r for r in q}
    # 10 bins over [-1, 1]: Q = -0.5 -> bin 2 [-0.6, -0.4), Q = 0.5 -> bin 7 [0.4, 0.6)
    assert (bin_of["2"]["n_episodes"], bin_of["2"]["n_success"]) == ("8", "4")  # epoch 2: 2 + 2
    assert (bin_of["7"]["n_episodes"], bin_of["7"]["n_success"]) == ("8", "5")  # epoch 3: 3 + 2
    assert float(bin_of["7"]["success_rate"]) == pytest.approx(5 / 8)
    assert (bin_of["none"]["n_episodes"], bin_of["none"]["n_success"]) == ("8", "1")  # epoch 1
    assert sum(int(r["n_episodes"]) for r in q) == 24
    assert float(bin_of["7"]["q_lo"]) == pytest.approx(0.4) and float(bin_of["7"]["q_hi"]) == pytest.approx(0.6)


def test_injected_q_by_epoch(runs_dir: Path):
    r = R.load_run(runs_dir / "alfworld" / "memrl" / "seed=0")
    qs = R.injected_q_by_epoch(r)
    assert sorted(qs) == [2, 3]
    assert qs[2] == [-0.5] * 4 and sorted(qs[3]) == [0.2, 0.5, 0.5, 0.5, 0.8]


def test_readings_name_the_forgetting_reading_and_give_pools_per_epoch(tmp_path: Path):
    # S: epoch 2 has no failure (FR = 0/0); FR_3 = 1/1 (t0 solved at 2, failed at 3)
    run = write_run(tmp_path / "runs" / "r", memory="memrl", seed=0, S=[[1, 0], [1, 1], [0, 1]],
                    tasks=["t0", "t1"])
    pools = {(1, "t0"): (0, False), (1, "t1"): (0, False),  # epoch 1: empty bank
             (2, "t0"): (4, False), (2, "t1"): (2, True),   # mean 3, own-only 1 of 2
             (3, "t0"): (5, True), (3, "t1"): (1, True)}    # mean 3, own-only 2 of 2
    rows = [json.loads(x) for x in RunDir(run).episodes.read_text().splitlines()]
    for r in rows:
        pool, own = pools[(r["epoch"], r["task_id"])]
        r["info"]["retrieval"] = {"pool": pool, "own_only": own}
    RunDir(run).episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for reading, used in [("skip", 1.0), ("zero", 0.5)]:
        out = tmp_path / reading
        files = R.write_report([tmp_path / "runs"], out, n_boot=50, zero_fail=reading, warn=lambda m: None)
        md = files["readings.md"].read_text()
        assert f"The tables use the reading `{reading}`" in md
        # one 0/0 epoch of the two epochs >= 2; the means under both readings whichever is used
        assert "| alfworld | memrl | 1 | 2 | 0.500 | 1.000 |" in md
        # per epoch: retrievals, empty pools, mean pool size (empty = 0), own-only share
        assert "| alfworld | memrl | 1 | 2 | 2 | 0.00 | – |" in md  # nothing to share over
        (t1,) = read_csv(out / "table1.csv")
        assert float(t1["forgetting_mean"]) == pytest.approx(used)
    assert "| alfworld | memrl | 2 | 2 | 0 | 3.00 | 0.500 |" in md
    assert "| alfworld | memrl | 3 | 2 | 0 | 3.00 | 1.000 |" in md


def test_lambda_grouping_three_values(tmp_path: Path):
    root = tmp_path / "multirun"
    # per λ, two seeds; Last per run is row 3's mean
    plan = {0.0: ([[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]], [[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]),
            0.5: ([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]),
            1.0: ([[0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], [[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])}
    for lam, mats in plan.items():
        for seed, S in enumerate(mats):
            write_run(root / f"memory.lam={lam},seed={seed}", memory="memrl", seed=seed, S=S, lam=lam)
    write_run(root / "baseline", memory="none", seed=0, S=MATRICES[("none", 0)])
    out = tmp_path / "out"
    files = R.write_report([root], out, n_boot=200, warn=lambda m: None)
    assert files["lambda.png"].is_file() and files["lambda.csv"].is_file()
    rows = read_csv(out / "lambda.csv")
    assert [float(r["lam"]) for r in rows] == [0.0, 0.5, 1.0]
    assert [r["n_seeds"] for r in rows] == ["2", "2", "2"]
    assert [float(r["last_mean"]) for r in rows] == pytest.approx([0.375, 0.625, 1.0])
    # CSR: λ=0 (1/4, 2/4); λ=0.5 (3/4, 2/4); λ=1 (4/4, 4/4)
    assert [float(r["csr_mean"]) for r in rows] == pytest.approx([0.375, 0.625, 1.0])
    t1 = {r["method"] for r in read_csv(out / "table1.csv")}
    assert t1 == {"memrl (lam=0.0)", "memrl (lam=0.5)", "memrl (lam=1.0)", "none"}
    # the baseline is compared with each λ group
    assert len(read_csv(out / "comparisons.csv")) == 3


def test_topk_grid_and_transfer_table(tmp_path: Path):
    root = tmp_path / "runs"
    S = MATRICES[("memrl", 0)]
    for k1, k2 in [(5, 1), (5, 3), (10, 1), (10, 3)]:
        d = write_run(root / f"k{k1}-{k2}", memory="memrl", seed=0, S=S)
        card = json.loads(RunDir(d).card.read_text())
        card["config"]["memory"].update(k1=k1, k2=k2)
        RunDir(d).card.write_text(json.dumps(card))
    # transfer runs: the held-out evaluation (eval_episodes.jsonl) counts, not the training
    # episodes (all solved here); best epoch SR 2/4 (epoch 2) and 3/4 (epoch 1)
    for seed, rows in enumerate([[[0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0]],
                                 [[1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]]):
        write_run(root / f"transfer{seed}", memory="memrl", seed=seed, S=[[1, 1]] * 3, tasks=["a", "b"],
                  mode="transfer", eval_S=rows)
    # the held-out evaluation is read from the eval records only: training records carry no
    # evaluation, whatever their info says
    old = write_run(tmp_path / "old", memory="memrl", seed=0, S=[[0, 1, 1, 1], [0, 0, 0, 0]],
                    mode="transfer", info={"phase": "valid"})
    assert R.eval_sr_curve(R.load_run(old)) == []
    out = tmp_path / "out"
    files = R.write_report([root], out, n_boot=200, warn=lambda m: None)
    assert files["topk_grid.png"].is_file()
    grid = {(int(r["k1"]), int(r["k2"])): float(r["last_mean"]) for r in read_csv(out / "topk_grid.csv")}
    assert grid == {(5, 1): 0.75, (5, 3): 0.75, (10, 1): 0.75, (10, 3): 0.75}
    (t2,) = read_csv(out / "table2.csv")
    assert float(t2["best_sr_mean"]) == pytest.approx((0.5 + 0.75) / 2)
    assert float(t2["best_epoch_mean"]) == pytest.approx(1.5)
    assert (t2["n_tasks"], t2["n_seeds"]) == ("4", "2")  # the 4 held-out tasks, not the 2 trained on
    assert "memrl" in (out / "table2.md").read_text()
    # transfer runs are not in Table 1
    assert all("transfer" not in r["method"] for r in read_csv(out / "table1.csv"))
    assert len(read_csv(out / "table1.csv")) == 4


def test_duplicate_seed_in_a_group_is_dropped(tmp_path: Path):
    root = tmp_path / "runs"
    write_run(root / "a", memory="none", seed=0, S=MATRICES[("none", 0)])
    write_run(root / "b", memory="none", seed=0, S=MATRICES[("none", 1)])
    msgs: list[str] = []
    groups = R.group_runs([R.load_run(d) for d in R.find_runs([root])], warn=msgs.append)
    assert len(groups) == 1 and len(groups[0].runs) == 1 and groups[0].runs[0].path.name == "a"
    assert msgs and "same group and seed" in msgs[0]


# --------------------------------------------------------------------------- CLI
def test_cli_writes_and_prints_paths(runs_dir: Path, tmp_path: Path):
    out = tmp_path / "cli_out"
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "report.py"), str(runs_dir),
                        "--out", str(out), "--n-boot", "500"], capture_output=True, text=True,
                       timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr
    printed = [line.split()[-1] for line in p.stdout.splitlines()[1:] if line.strip()]
    assert str(out / "table1.md") in printed and str(out / "comparisons.csv") in printed
    assert all(Path(x).is_file() for x in printed)
    empty = tmp_path / "empty"
    empty.mkdir()
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "report.py"), str(empty), "--out",
                        str(tmp_path / "o2")], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode == 2 and "no run directory" in p.stderr


# --------------------------------------------------------------------------- wandb logger
def test_epoch_metrics_selects_this_epoch():
    m = {"sr": [0.25, 0.5, 0.75], "csr_curve": [0.25, 0.5, 1.0], "forgetting": [0.1, 0.2],
         "last": 0.75, "csr": 1.0, "n_tasks": 4, "tokens": {"prompt": 7, "completion": 3},
         "missing_cells": [], "forgetting_mean": 0.15}
    from memrl.control.tracking import epoch_metrics

    e2 = epoch_metrics(m, 2)
    assert (e2["sr"], e2["csr"], e2["forgetting"]) == (0.5, 0.5, 0.1)
    assert e2["tokens/prompt"] == 7 and e2["n_tasks"] == 4 and "missing_cells" not in e2
    assert "forgetting" not in epoch_metrics(m, 1)


class FakeWandb:
    """Stands in for the wandb module: records init kwargs, logged rows and artifacts."""

    def __init__(self):
        self.inits, self.logged, self.finished, self.artifacts = [], [], [], []

    class Settings(dict):
        def __init__(self, **kw):
            super().__init__(**kw)

    class Histogram:
        def __init__(self, values):
            self.values = list(values)

    class Table:
        def __init__(self, columns, data):
            self.columns, self.data = columns, data

    class Artifact:
        def __init__(self, name, type, description=""):
            self.name, self.type, self.dirs = name, type, []

        def add_dir(self, path, name=None):
            self.dirs.append((name, path))

    def init(self, **kw):
        self.inits.append(kw)
        fake = self

        class Run:
            id = kw.get("id")

            def log(self, row, step):
                fake.logged.append((step, row))

            def log_artifact(self, art):
                fake.artifacts.append(art)

            def finish(self, exit_code=0):
                fake.finished.append(exit_code)
        return Run()


def test_wandb_logger_offline_by_default_and_online_needs_key(tmp_path: Path, monkeypatch):
    from memrl.control.tracking import EpochLogger, make_epoch_logger

    assert not make_epoch_logger(None, run_dir=tmp_path, config={}).active
    assert type(make_epoch_logger({"name": "none"}, run_dir=tmp_path, config={})) is EpochLogger
    with pytest.raises(ValueError, match="logger.wandb.bogus"):
        make_epoch_logger({"name": "wandb", "wandb": {"bogus": 1}}, run_dir=tmp_path, config={})

    fake = FakeWandb()
    cfg = {"env": {"name": "alfworld"}, "memory": {"name": "memrl"}}
    lg = make_epoch_logger({"name": "wandb"}, run_dir=tmp_path / "r", config=cfg, wandb_module=fake)
    kw = fake.inits[0]
    assert kw["mode"] == "offline" and kw["dir"] == str(tmp_path / "r") and kw["group"] == "alfworld/memrl"
    lg.log_epoch({"sr": [0.5], "csr_curve": [0.5]}, 1)
    lg.finish("interrupted")
    assert fake.finished == [1]
    ((step, row),) = fake.logged
    assert step == 1 and {k: row[k] for k in ("epoch", "sr", "csr")} == {"epoch": 1.0, "sr": 0.5, "csr": 0.5}
    assert row["episodes"].data == []  # no episode in this run directory
    # resumed: the same wandb run id
    make_epoch_logger({"name": "wandb"}, run_dir=tmp_path / "r", config=cfg, wandb_module=fake)
    assert fake.inits[1]["id"] == kw["id"]

    online = {"name": "wandb", "wandb": {"mode": "online", "api_key_env": "MEMRL_TEST_WANDB_KEY"}}
    monkeypatch.delenv("MEMRL_TEST_WANDB_KEY", raising=False)
    make_epoch_logger(online, run_dir=tmp_path / "s", config=cfg, wandb_module=fake)
    assert fake.inits[-1]["mode"] == "offline"
    monkeypatch.setenv("MEMRL_TEST_WANDB_KEY", "k" * 40)
    make_epoch_logger(online, run_dir=tmp_path / "t", config=cfg, wandb_module=fake)
    assert fake.inits[-1]["mode"] == "online" and fake.inits[-1]["settings"]["api_key"] == "k" * 40


# --------------------------------------------------------------------------- sweep configs
@pytest.mark.parametrize("name,keys", [("lambda", {"memory.lam", "seed"}), ("alpha", {"memory.alpha", "seed"}),
                                       ("topk", {"memory.k1", "memory.k2", "seed"})])
def test_sweep_configs_set_sweeper_params(name: str, keys: set[str], monkeypatch):
    from hydra import compose, initialize_config_dir

    monkeypatch.setenv("ALFWORLD_DATA", "/nonexistent")
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose("config", overrides=[f"+sweep={name}", "hydra/launcher=parallel"],
                      return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert set(params) == keys
    assert all("," in str(v) for v in params.values())  # each is a sweep
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.n_jobs == 2
    if name == "topk":  # the Cartesian product must never have k2 > k1
        k1 = [int(x) for x in str(params["memory.k1"]).split(",")]
        k2 = [int(x) for x in str(params["memory.k2"]).split(",")]
        assert max(k2) <= min(k1)


def test_logger_config_group_composes(monkeypatch):
    from hydra import compose, initialize_config_dir

    from memrl.control.tracking import parse_settings

    monkeypatch.setenv("ALFWORLD_DATA", "/nonexistent")
    # `logger=...` once the group is in config.yaml's defaults list, `+logger=...` before
    plus = "" if "- logger:" in (REPO / "configs" / "config.yaml").read_text() else "+"
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        cfg = compose("config", overrides=[f"{plus}logger=wandb", "logger.wandb.mode=online"])
        none = compose("config", overrides=[f"{plus}logger=none"])
    s = parse_settings(cfg.logger)
    assert (s.name, s.wandb.mode, s.wandb.project, s.wandb.api_key_env) == ("wandb", "online", "memrl", "WANDB_API_KEY")
    assert parse_settings(none.logger).name == "none"


def test_readings_give_the_utility_correlation_and_the_share_from_successes(tmp_path: Path):
    run = write_run(tmp_path / "runs" / "r", memory="memrl", seed=0, S=[[1, 0, 1], [1, 0, 1], [1, 0, 0]],
                    tasks=["t0", "t1", "t2"])
    rows = [json.loads(x) for x in RunDir(run).episodes.read_text().splitlines()]
    q = {"t0": 0.4, "t1": -0.4, "t2": 0.1}  # each task gets its own epoch-1 memory back
    for r in rows:
        if r["epoch"] == 1:
            r["written"] = f"m-{r['task_id']}"
        else:
            r["injected"] = [{"id": f"m-{r['task_id']}", "q": q[r["task_id"]] * (r["epoch"] - 1), "sim": 1.0}]
    RunDir(run).episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = R.write_report([tmp_path / "runs"], tmp_path / "out", n_boot=50,
                        warn=lambda m: None)["readings.md"].read_text()
    # memories: t0 (Q 0.8 at its last injection, 2/2 successes), t1 (-0.8, 0/2), t2 (0.2, 1/2)
    assert "| alfworld | memrl | 3 | 6 | 0.990 [" in md and "| 1.000 [" in md  # Pearson, Spearman
    # epoch 2 and 3: the memories of t0 and t2 were written by successes, t1's by a failure
    assert "| alfworld | memrl | 2 | 2 | 1 | 0 | 0.667 |" in md
