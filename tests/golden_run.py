"""Small full runs whose outputs are kept as a golden file (tests/fixtures/golden/), so a change
that should not change behaviour (a restructuring) is checked byte for byte where the outputs
are deterministic: the episode records (with their cache keys, seeds, injected memories and
staleness), the bank-update log, the memory texts, the final bank, the metrics, the async
launch log and the run card's config and data fingerprint. Only wall-clock fields are left
out (`duration_s`, timestamps).

The runs go through `python -m memrl.cli run` on the tiny benchmark (tests/tiny_env.py) with the
scripted model and the hashing embedder: MemRL in batches of 2 for 3 epochs; the same run
stopped after 2 epochs and extended to 3 (a resume must end in the same state); MemRL under
the async schedule with one episode in flight; RAG.

    python tests/golden_run.py --write     # regenerate the golden file (after a deliberate change)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "configs"
GOLDEN = REPO / "tests" / "fixtures" / "golden" / "runs.json"
BASE = ["env=tiny", "env.n_tasks=6", "embedder=hashing", "llm=scripted", "llm.cache=true",
        "runner.progress=false", "seed=7", f"hydra.searchpath=[file://{FIXTURES}]"]
RUNS: dict[str, list[list[str]]] = {  # name -> the commands run in one directory, in order
    "memrl_batch": [["memory=memrl", "runner.batch_size=2", "runner.epochs=3"]],
    "memrl_resumed": [["memory=memrl", "runner.batch_size=2", "runner.epochs=2"],
                      ["memory=memrl", "runner.batch_size=2", "runner.epochs=3"]],
    "memrl_async": [["memory=memrl", "runner.schedule=async", "runner.max_in_flight=1", "runner.epochs=2"]],
    "rag": [["memory=rag", "runner.epochs=2"]],
}
VOLATILE = {"duration_s", "ts", "time", "started", "ended", "seeded_at", "created"}


def _environ(tmp: Path) -> dict[str, str]:
    return {**os.environ, "MEMRL_CACHE_DIR": str(tmp / "cache"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}


def _strip(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _jsonl(path: Path) -> list[Any]:
    return [_strip(json.loads(line)) for line in path.read_text().splitlines() if line.strip()] \
        if path.exists() else []


def outputs(run_dir: Path) -> dict[str, Any]:
    """What a run directory holds that must not change, wall-clock fields left out."""
    from memrl.core.rundir import RunDir
    from memrl.memory.bankio import read_entries, resolve

    rd = RunDir(run_dir)
    card = json.loads(rd.card.read_text())
    bank = sorted(({k: v for k, v in e.to_dict().items() if k != "embedding"}
                   for e in read_entries(resolve(str(run_dir)))), key=lambda e: e["memory_id"])
    return {
        "episodes": _jsonl(rd.episodes),
        "bank_updates": _jsonl(rd.bank_updates),
        "memories": _jsonl(rd.memories),
        "launches": _jsonl(rd.launches),
        "metrics": _strip(json.loads(rd.metrics.read_text())),
        "bank": _strip(bank),
        "card": {k: _strip(card.get(k)) for k in ("config", "data_fingerprint", "n_tasks", "memory_setup", "status")},
    }


def produce(tmp: Path) -> dict[str, Any]:
    """Run every golden run under `tmp`; returns their outputs by name."""
    out: dict[str, Any] = {}
    for name, commands in RUNS.items():
        run_dir = tmp / name
        for args in commands:
            done = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *BASE, *args, f"hydra.run.dir={run_dir}"],
                                  cwd=tmp, env=_environ(tmp), capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"{name}: {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        out[name] = outputs(run_dir)
    # the runs' own folder (the cache path in the card's config) reads the same wherever they ran
    return json.loads(json.dumps(out).replace(str(tmp), "<tmp>"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {GOLDEN.relative_to(REPO)}")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests"))
    with tempfile.TemporaryDirectory() as tmp:
        got = produce(Path(tmp))
    text = json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if a.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
        print(f"wrote {GOLDEN} ({len(text)} bytes)")
    else:
        print(text[:2000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
