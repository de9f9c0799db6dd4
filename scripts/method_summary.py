"""What each run of a comparison did, beside its Last and CSR (docs/methods.md):

    python scripts/method_summary.py RUNS_DIR [--out summary.json]

For every run directory under RUNS_DIR (one level down): Last, CSR, SR per epoch, the
successes, the model calls by purpose, the tokens, the episodes whose memory's model call
failed (`writer_error`), the memories injected per episode and the bank's entries by kind;
and what each newer method kept: ReasoningBank's items and how often its judge agreed with the
env on the episodes that kept items, AWM's workflows and the env's outcome of the episodes
they came from, ExpeL's insight list, MemQ's credit by provenance depth. Everything is read
from the run's records, metrics and bank.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from memrl.core.rundir import RunDir
from memrl.memory.bankio import read_entries, resolve


def summary(run_dir: Path) -> dict[str, Any]:
    rd = RunDir(run_dir)
    card = json.loads(rd.card.read_text())
    metrics = json.loads(rd.metrics.read_text())
    records = [json.loads(x) for x in rd.episodes.read_text().splitlines()]
    entries = list(read_entries(resolve(str(run_dir)))) if rd.bank.exists() else []
    name = card["config"]["memory"]["name"]
    row: dict[str, Any] = {
        "method": name, "last": metrics["last"], "csr": metrics["csr"], "sr_by_epoch": metrics["sr"],
        "episodes": len(records), "successes": sum(r["success"] for r in records),
        "calls_by_purpose": dict(sorted(Counter(c["purpose"] for r in records for c in r["model_calls"]).items())),
        "tokens": sum(sum(r["tokens"].values()) for r in records),
        "writer_errors": sum(bool(r["info"].get("writer_error")) for r in records),
        "injected_per_episode": round(sum(len(r["injected"]) for r in records) / max(len(records), 1), 2),
        "bank_kinds": dict(sorted(Counter(e.kind for e in entries).items())),
    }
    if name == "reasoningbank":
        mine = [e for e in entries if e.kind.startswith("reasoning")]
        row["items"] = sum(len(e.extra.get("items", [])) for e in mine)
        row["judge_agrees_with_env"] = [sum(e.extra.get("judged_success") == e.success for e in mine), len(mine)]
        row["items_of_first_entry"] = mine[0].extra.get("items") if mine else None
    elif name == "awm":
        mine = [e for e in entries if e.kind == "workflow"]
        row["workflows"] = sum(len(e.extra.get("workflows", [])) for e in mine)
        row["workflow_entries_from_env_successes"] = [sum(e.success for e in mine), len(mine)]
    elif name == "expel":
        row["insights"] = next((e.extra.get("insights") for e in entries if e.kind == "insights"), [])
    elif name == "memq":
        depths = Counter(d for e in entries for d in e.extra.get("credited", {}).values())
        row["credited_by_depth"] = dict(sorted(depths.items()))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rows = {r["method"]: r for r in (summary(d) for d in sorted(a.runs.iterdir()) if RunDir(d).card.exists())}
    text = json.dumps(rows, indent=1, sort_keys=True) + "\n"
    if a.out:
        a.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
