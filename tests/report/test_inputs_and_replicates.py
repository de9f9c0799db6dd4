"""The report says no more than the runs measured (issue 30): copies of one run under another
seed are one replicate, every path it is given is used or refused, unfinished runs and runs
on different task lists are refused unless a flag marks them, labels and file names stay
short and unique, and one number carries one interval wherever it is drawn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report import MATRICES, read_csv, write_run

from memrl import report as R
from memrl.cli import main as memrl_main
from memrl.core.rundir import RunDir
from memrl.metrics.compute import wilson


def edit(d: Path, records=None, card=None) -> Path:
    """Rewrite a hand-written run's records (`records(rec) -> None`) and card (`card(dict)`)."""
    rd = RunDir(d)
    if records is not None:
        rows = [json.loads(x) for x in rd.episodes.read_text().splitlines()]
        for r in rows:
            records(r)
        rd.episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if card is not None:
        data = json.loads(rd.card.read_text())
        card(data)
        rd.card.write_text(json.dumps(data))
    return d


def played(salt: str = "", transcript: str = "same"):
    """Records as a model-driven run writes them: model-call keys (the same for every seed
    unless `salt` differs) and a transcript (`transcript` names its content)."""
    def fn(r):
        r["model_calls"] = [{"purpose": "act", "key": f"{salt}{r['task_id']}-{r['epoch']}"}]
        r["transcript"] = [{"action": f"{transcript} {r['task_id']}", "observation": str(r["success"])}]
    return fn


def two_methods(root: Path, seeds=(0,), *, salt=lambda s: "", transcript=lambda s: "same") -> Path:
    """memrl and none on the same 4 tasks, each seed a run; by default every further seed
    repeats seed 0 exactly (the same requests, as a warm cache at temperature 0 answers)."""
    for memory in ("memrl", "none"):
        for s in seeds:
            d = write_run(root / memory / f"seed={s}", memory=memory, seed=s, S=MATRICES[(memory, 0)])
            edit(d, records=played(salt(s), transcript(s)))
    return root


def report(paths, out: Path, **kw) -> tuple[dict, list[str]]:
    msgs: list[str] = []
    files = R.write_report(paths, out, n_boot=500, warn=msgs.append, **kw)
    return files, msgs


# ------------------------------------------------------------------ 1. copies are one replicate
@pytest.mark.parametrize("copies", ["same requests", "same episodes"])
def test_seeds_that_repeat_a_run_give_the_numbers_of_one_seed(tmp_path: Path, copies: str):
    """Finding 1: a seed whose run repeats seed 0's episodes (a warm cache at temperature 0)
    drew zero-width intervals and doubled McNemar's discordant pairs. Now the report's
    intervals and p-values are those of one seed, and it says why."""
    salt = (lambda s: "") if copies == "same requests" else (lambda s: f"s{s}/")
    one, _ = report([two_methods(tmp_path / "one", (0,), salt=salt)], tmp_path / "o1")
    three, msgs = report([two_methods(tmp_path / "three", (0, 1, 2), salt=salt)], tmp_path / "o3")
    for name in ("table1.csv", "comparisons.csv", "sr_by_epoch.csv"):
        a, b = read_csv(one[name]), read_csv(three[name])
        drop = {"seeds", "copies"}  # the copies are named, nothing else differs
        assert [{k: v for k, v in r.items() if k not in drop} for r in a] == \
               [{k: v for k, v in r.items() if k not in drop} for r in b], name
    (t1,) = [r for r in read_csv(three["table1.csv"]) if r["memory"] == "memrl"]
    assert t1["n_seeds"] == "1" and t1["copies"] == "seed 1 = seed 0, seed 2 = seed 0"
    assert float(t1["last_hi"]) > float(t1["last_lo"])  # never a zero-width interval
    (cmp,) = read_csv(three["comparisons.csv"])
    assert (cmp["ref_only"], cmp["method_only"]) == ("2", "0")  # one seed's pairs, not three
    said = [m for m in msgs if "repeats seed 0" in m]
    assert len(said) == 4 and all("not an independent replicate" in m for m in said)
    assert "seed 1 = seed 0" in three["table1.md"].read_text()
    assert "copies" in (tmp_path / "o3" / "groups.md").read_text()


def test_seeds_that_played_differently_stay_replicates(tmp_path: Path):
    """The same outcomes from different requests and transcripts are two measurements: kept."""
    root = two_methods(tmp_path / "r", (0, 1), salt=lambda s: f"s{s}/", transcript=lambda s: f"try{s}")
    files, msgs = report([root], tmp_path / "o")
    assert {r["n_seeds"] for r in read_csv(files["table1.csv"])} == {"2"}
    assert not [m for m in msgs if "repeats seed" in m]


def test_outcomes_alone_never_make_a_copy(tmp_path: Path):
    """Records without transcripts or model calls (an oracle, an old run) that happen to agree
    are not evidence of a copy."""
    from memrl.report.replicates import Episodes, same_episodes

    a = write_run(tmp_path / "a", memory="none", seed=0, S=MATRICES[("none", 0)])
    b = write_run(tmp_path / "b", memory="none", seed=1, S=MATRICES[("none", 0)])
    ea, eb = (Episodes.of(R.load_run(d).records) for d in (a, b))
    assert same_episodes(ea, eb) is None
    edit(a, records=played())
    edit(b, records=played())
    assert same_episodes(*(R.load_run(d).episodes for d in (a, b))) is not None


# ------------------------------------------------------------------ 2. every path used or refused
def test_a_mistyped_run_path_is_refused_not_dropped(tmp_path: Path, capsys):
    """Finding 2: `memrl report run_memrl run_rga` wrote a report without RAG, exit 0."""
    root = two_methods(tmp_path / "runs")
    good, typo = root / "memrl" / "seed=0", tmp_path / "run_rga"
    assert memrl_main(["report", str(good), str(typo), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memrl: cannot report these inputs:") and str(typo) in err
    assert not (tmp_path / "o").exists()
    assert memrl_main(["view", str(good), str(typo), "--out", str(tmp_path / "v.html")]) == 2
    assert str(typo) in capsys.readouterr().err and not (tmp_path / "v.html").exists()
    with pytest.raises(R.Refused, match="run_rga: no such file or directory"):
        report([good, typo], tmp_path / "o")
    not_a_run = tmp_path / "notes"
    not_a_run.mkdir()
    with pytest.raises(R.Refused, match="notes: not a run directory"):
        report([good, not_a_run], tmp_path / "o")


# ------------------------------------------------------------------ 3. unfinished runs
def failed_run(root: Path) -> Path:
    """A run that failed after one episode of the 3 epochs it planned."""
    d = write_run(root / "rag" / "seed=0", memory="rag", seed=0, S=[[0, 0, 0, 0]],
                  skip={("t1", 1), ("t2", 1), ("t3", 1)})
    return edit(d, card=lambda c: (c.update(status="failed", error="boom", n_tasks=4),
                                   c["config"]["runner"].update(epochs=3)))


def test_a_failed_run_is_refused_or_marked_everywhere(tmp_path: Path, capsys, monkeypatch):
    """Finding 3: a failed run with one episode read `1 task | 1 epoch | 0.000` in the tables
    and comparisons.md, unflagged."""
    root = two_methods(tmp_path / "runs")
    failed_run(root)
    assert memrl_main(["report", str(root), "--out", str(tmp_path / "o")]) == 2
    assert "--include-unfinished" in capsys.readouterr().err
    with pytest.raises(R.Refused, match=r"rag/seed=0: not finished \(status failed, 0 of 3 epochs complete\)"):
        report([root], tmp_path / "o")
    from memrl.report import figures as F

    figures: list = []
    real_save = F._save
    monkeypatch.setattr(F, "_save", lambda fig, path: figures.append(fig) or real_save(fig, path))
    files, msgs = report([root], tmp_path / "o", include_unfinished=True)
    assert any("not finished" in m for m in msgs)
    t1 = {r["method"]: r for r in read_csv(files["table1.csv"])}
    assert "rag [unfinished]" in t1 and t1["rag [unfinished]"]["marks"] == "unfinished"
    assert "rag [unfinished]" in files["table1.md"].read_text()
    assert "[unfinished]: holds a run that did not finish" in files["table1.md"].read_text()
    assert "rag [unfinished]" in files["sr_by_epoch.md"].read_text()
    assert "| memrl | rag [unfinished] |" in files["comparisons.md"].read_text()
    legends = [t.get_text() for fig in figures for ax in fig.axes if ax.get_legend()
               for t in ax.get_legend().get_texts()]
    assert any(t.startswith("rag [unfinished]") for t in legends), legends  # the curves' legend
    assert "rag [unfinished]" in files["table1.tex"].read_text().replace(r"\_", "_")


def test_a_run_with_no_episode_is_named(tmp_path: Path):
    root = two_methods(tmp_path / "runs")
    bare = root / "rag" / "seed=0"
    bare.mkdir(parents=True)
    RunDir(bare).card.write_text(json.dumps({"status": "failed", "config": {}}))
    with pytest.raises(R.Refused, match=r"rag/seed=0: a run with no episode yet \(status failed\)"):
        report([root], tmp_path / "o")
    _, msgs = report([root], tmp_path / "o", include_unfinished=True)
    assert any("no episode yet" in m and "left out" in m for m in msgs)


def test_runs_on_different_task_lists_are_refused_unless_mixed(tmp_path: Path):
    root = two_methods(tmp_path / "runs")
    for memory, fp in (("memrl", "aaaa1111"), ("none", "bbbb2222")):
        edit(root / memory / "seed=0", card=lambda c, fp=fp: c.update(data_fingerprint=fp * 8, n_tasks=4))
    with pytest.raises(R.Refused, match="2 different task lists"):
        report([root], tmp_path / "o")
    files, _ = report([root], tmp_path / "o", mixed=True)
    labels = {r["method"] for r in read_csv(files["table1.csv"])}
    assert labels == {"memrl (tasks=aaaa1111)", "none (tasks=bbbb2222)"}
    assert "comparisons.csv" not in files  # never compared across task lists


def test_comparisons_pair_only_groups_under_the_same_conditions(tmp_path: Path):
    """A method run on another model is labelled with it and compared with nothing run on
    another model."""
    root = two_methods(tmp_path / "runs")
    d = write_run(root / "none-b" / "seed=0", memory="none", seed=0, S=MATRICES[("none", 1)])
    edit(d, card=lambda c: c["config"].update(llm={"name": "b", "model": "model-b"}))
    for memory in ("memrl", "none"):
        edit(root / memory / "seed=0", card=lambda c: c["config"].update(llm={"name": "a", "model": "model-a"}))
    files, _ = report([root], tmp_path / "o")
    labels = [r["method"] for r in read_csv(files["table1.csv"])]
    assert labels == ["memrl (llm.model=model-a)", "none (llm.model=model-a)", "none (llm.model=model-b)"]
    (cmp,) = read_csv(files["comparisons.csv"])
    assert cmp["method"] == "none (llm.model=model-a)"


# ------------------------------------------------------------------ 5. short, unique, safe labels
def test_runs_differing_in_many_keys_get_short_labels_and_safe_file_names(tmp_path: Path):
    """Finding 5: OSError File name too long, and legends that dump every differing key
    (embedder.api_base=http://127.0.0.1:...)."""
    root = tmp_path / "runs"
    for i in range(2):
        d = write_run(root / f"m{i}", memory="memrl", seed=0, S=MATRICES[("memrl", i)])

        def change(c, i=i):
            c["config"]["memory"].update({f"knob_{k:02d}_with_a_rather_long_name": f"value-{i}-{'x' * 40}"
                                          for k in range(12)})
            c["config"]["embedder"] = {"name": "e", "backend": "litellm", "model": "emb",
                                       "api_base": f"http://127.0.0.1:{40000 + i}/v1/embeddings/very/long"}
        edit(d, card=change)
    files, _ = report([root], tmp_path / "o")
    labels = [r["method"] for r in read_csv(files["table1.csv"])]
    assert len(set(labels)) == 2 and all(len(x) <= 64 for x in labels), labels
    assert not any("127.0.0.1" in x or "api_base" in x for x in labels)
    assert all(len(p.name) <= 100 for p in files.values())
    groups = (tmp_path / "o" / "groups.md").read_text()
    assert "knob_00_with_a_rather_long_name" in groups  # the full settings, once, beside the label


def test_an_address_names_a_group_only_when_nothing_else_does():
    from memrl.report.grouping import short_labels

    url = "http://127.0.0.1:{}/v1"
    labels = short_labels([("alf", "rag", (("embedder.api_base", url.format(4000)), ("embedder.model", "a"))),
                           ("alf", "rag", (("embedder.api_base", url.format(4001)), ("embedder.model", "b")))])
    assert labels == ["rag (embedder.model=a)", "rag (embedder.model=b)"]
    labels = short_labels([("alf", "rag", (("embedder.api_base", "http://h:4000/v1"),)),
                           ("alf", "rag", (("embedder.api_base", "http://h:4001/v1"),))])
    assert len(set(labels)) == 2 and all("4000" in x or "4001" in x for x in labels)
    # a key the others already imply is left out (llm.name beside llm.model); a λ sweep keeps λ
    labels = short_labels([("alf", "memrl", (("llm.model", "m-a"), ("llm.name", "a"), ("memory.lam", 0.0))),
                           ("alf", "memrl", (("llm.model", "m-a"), ("llm.name", "a"), ("memory.lam", 1.0))),
                           ("alf", "none", (("llm.model", "m-b"), ("llm.name", "b")))])
    assert labels == ["memrl (llm.model=m-a, lam=0.0)", "memrl (llm.model=m-a, lam=1.0)", "none (llm.model=m-b)"]
    # two long values that shorten alike are still told apart
    labels = short_labels([("alf", "rag", (("env.x", "a" * 30 + "1" + "b" * 30),)),
                           ("alf", "rag", (("env.x", "a" * 30 + "2" + "b" * 30),))])
    assert len(set(labels)) == 2


def test_safe_names_are_bounded_and_distinct():
    from memrl.report.figures import safe_name

    a, b = safe_name("x" * 300 + "a"), safe_name("x" * 300 + "b")
    assert len(a) <= 80 and len(b) <= 80 and a != b
    assert safe_name("alfworld_memrl (lam=0.5)_seed0") == "alfworld_memrl_lam=0.5_seed0"


# ------------------------------------------------------------------ 6. one interval per quantity
def test_the_report_and_the_runs_plot_give_one_interval_for_0_of_3(tmp_path: Path):
    """Finding 6: for 0/3 the run's plot drew Wilson [0, 0.56], the report a bootstrap band of
    width 0. Both now draw Wilson over the run's 3 tasks, and say so with n."""
    from memrl.report.series import curve_band
    from memrl.metrics.compute import sr_curve

    d = write_run(tmp_path / "runs" / "r", memory="none", seed=0, S=[[0, 0, 0], [0, 1, 0]], tasks=["a", "b", "c"])
    files, _ = report([tmp_path / "runs"], tmp_path / "o")
    (row,) = read_csv(files["table1.csv"])
    _, lo, hi = wilson(1, 3)  # Last: epoch 2, 1 of 3 tasks
    assert (float(row["last_lo"]), float(row["last_hi"])) == pytest.approx((lo, hi))
    assert row["interval"] == "Wilson, n=3 tasks"
    (g,) = R.group_runs([R.load_run(d)], warn=lambda m: None)
    band = curve_band(g, sr_curve, "sr")
    assert (band.lo[0], band.hi[0]) == pytest.approx(wilson(0, 3)[1:])
    assert band.hi[0] > 0.5 and band.how == "1 replicate: Wilson over 3 tasks"
    ep = read_csv(files["sr_by_epoch.csv"])
    assert [(float(r["sr_lo"]), float(r["sr_hi"])) for r in ep] == \
        [pytest.approx(wilson(0, 3)[1:]), pytest.approx(wilson(1, 3)[1:])]
    assert f"{wilson(0, 3)[2]:.3f}" == "0.561"  # docs/reading-results.md
    # the page draws the same interval for the same number
    from memrl.view.data import RunView
    from memrl.view.page import rate_intervals

    first = rate_intervals(RunView.load(d), "sr")[0]
    assert (first.lo, first.hi) == pytest.approx(wilson(0, 3)[1:]) and first.how == "Wilson, n=3 tasks"


# ------------------------------------------------------------------ the per-epoch table and LaTeX
def test_sr_by_epoch_and_latex_tables(tmp_path: Path, runs_dir: Path):
    files, _ = report([runs_dir], tmp_path / "o")
    rows = [r for r in read_csv(files["sr_by_epoch.csv"]) if r["method"] == "memrl"]
    # memrl seeds 0 and 1, per epoch: (1/4, 0), (2/4, 2/4), (3/4, 2/4)
    assert [float(r["sr_mean"]) for r in rows] == pytest.approx([0.125, 0.5, 0.625])
    assert all(r["interval"] == "t, n=2 replicates" for r in rows)
    for stem in ("table1", "sr_by_epoch", "comparisons"):
        tex = files[f"{stem}.tex"].read_text()
        assert tex.count(r"\toprule") == tex.count(r"\midrule") == tex.count(r"\bottomrule") == 1
        assert r"\begin{tabular}" in tex and "|" not in tex.split(r"\begin{tabular}")[1].split("}")[0]
        body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
        ncols = len(tex.split(r"\toprule")[1].split(r"\midrule")[0].split(" & "))
        assert body and all(len(line.split(" & ")) == ncols for line in body)
    assert r"$\Delta$ [95\% CI]" in files["comparisons.tex"].read_text()


def test_latex_escapes_what_labels_hold():
    from memrl.report.latex import escape

    assert escape("memrl (lam=0.5, tasks=ab_12) 50% & #1 {x} ~ ^") == \
        r"memrl (lam=0.5, tasks=ab\_12) 50\% \& \#1 \{x\} \textasciitilde{} \textasciicircum{}"
    assert escape("Δ λ χ² –") == r"$\Delta$ $\lambda$ $\chi^2$ --"
