"""The run directory: `RunDir` is the one place that names a run's files, and a run writes
nothing it does not name."""

from __future__ import annotations

import io
import json
import tokenize
from pathlib import Path

from coin_runner import CoinEnv, make_runner

from memrl.core.rundir import RunDir
from memrl.journal.runcard import FINISHED, RunCard
from memrl.metrics.compute import write_metrics
from memrl.report.plots import write_run_plots

REPO = Path(__file__).resolve().parents[2]
# names specific enough that a string literal spelling one is a copy of RunDir's
SPECIFIC = [RunDir.CARD, RunDir.EPISODES, RunDir.EVAL_EPISODES, RunDir.METRICS, RunDir.CHECKPOINT,
            RunDir.EVAL_CHECKPOINT, RunDir.JOURNAL, RunDir.LAST_COMMIT, RunDir.BANK_UPDATES, RunDir.WANDB_RUN_ID]


def test_paths():
    rd = RunDir("/r")
    assert rd == RunDir(Path("/r")) == RunDir(rd) and str(rd) == "/r"
    named = {rd.card: "run_card.json", rd.episodes: "episodes.jsonl", rd.eval_episodes: "eval_episodes.jsonl",
             rd.metrics: "metrics.json", rd.plots: "plots", rd.bank: "bank", rd.mem0: "mem0",
             rd.bank_updates: "bank_updates.jsonl", rd.state: "state", rd.hydra: ".hydra", rd.log: "run.log",
             rd.wandb: "wandb", rd.wandb_run_id: "wandb_run_id.txt"}
    assert all(p == Path("/r") / name for p, name in named.items())
    state = {rd.checkpoint: "checkpoint.json", rd.eval_checkpoint: "eval_checkpoint.json",
             rd.journal: "journal.json", rd.last_commit: "last_commit.json", rd.lock: "lock"}
    assert all(p == Path("/r/state") / name for p, name in state.items())


def test_find_walks_folders_and_needs_card_and_records(tmp_path):
    for d in ("a", "sweep/x=1", "sweep/x=2"):
        rd = RunDir(tmp_path / d).mkdir()
        rd.card.write_text("{}")
        rd.episodes.write_text("")
    RunDir(tmp_path / "sweep" / "card_only").mkdir().card.write_text("{}")
    found = RunDir.find([tmp_path / "sweep", tmp_path / "a", tmp_path / "a"])
    assert [rd.root.relative_to(tmp_path).as_posix() for rd in found] == ["a", "sweep/x=1", "sweep/x=2"]
    assert all(rd.is_run() for rd in found) and not RunDir(tmp_path / "sweep" / "card_only").is_run()


def test_no_other_module_spells_a_run_file_name():
    """A literal "episodes.jsonl" (etc.) anywhere but memrl/core/rundir.py is a second home."""
    found = []
    for folder in ("memrl", "envs", "baselines", "scripts", "tests"):
        for path in (REPO / folder).rglob("*.py"):
            if path == REPO / "memrl" / "core" / "rundir.py" or path == Path(__file__).resolve():
                continue
            tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
            for tok in tokens:
                if tok.type == tokenize.STRING and tok.string.strip("\"'rbf") in SPECIFIC:
                    found.append(f"{path.relative_to(REPO)}:{tok.start[0]}: {tok.string}")
    assert not found, "spell these through memrl.core.rundir.RunDir:\n" + "\n".join(found)


def test_a_run_writes_only_what_rundir_names(tmp_path):
    rd = RunDir(tmp_path / "run")
    runner, env, memory, _ = make_runner(rd, epochs=2, batch_size=2)
    tasks = CoinEnv().tasks()
    card = RunCard.create(rd, {"seed": 7}, model="hash", embedder="hashing-32", tasks=tasks)
    session = card.start_session(["test"])
    runner.run(tasks)
    card.end_session(session, FINISHED, llm={"calls": 1}, faults={})
    write_metrics(rd)
    write_run_plots(rd)
    names = {getattr(RunDir, a) for a in dir(RunDir) if a.isupper()}
    top = {p.name for p in rd.root.iterdir()}
    assert top <= names, top - names
    assert {RunDir.CARD, RunDir.EPISODES, RunDir.METRICS, RunDir.PLOTS, RunDir.BANK, RunDir.STATE} <= top
    assert {p.name for p in rd.state.iterdir()} <= names
    assert rd.checkpoint.is_file() and not rd.journal.exists()
    data = json.loads(rd.card.read_text())
    assert data["status"] == FINISHED and data["episodes"]["recorded"] == 10
    assert data["installed"]["n"] > 50 and len(data["installed"]["sha256"]) == 64
