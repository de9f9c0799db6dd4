"""Where every run under some folders stands: `memrl status DIR...` (also
`python -m memrl.cli status DIR...`).

One row per run directory found at or below the folders (a run, a sweep, `runs/`): its
status as the run card says it (running, interrupted, finished), the epochs done (complete
epochs: every task has a record) of those configured, Last (SR of the last complete epoch)
and CSR, the episodes that ended errored, the memories stored without their model-written
summary (`writer`), the spend recorded in its episodes ("+?": some model had no price; a cached
answer keeps the cost it had when it was paid for; runs from before episodes carried a cost
show the run card's paid total), and how long ago the run last wrote. A "running" run that
has not written for long may have been killed without a chance to say so.

Each run is named by its benchmark, its method with the settings that tell it apart from the
other runs listed (a λ sweep: `memrl (lam=0.5)`, as the report and the MemRL page name it:
memrl.report.grouping) and its seed; under it, `!` lines give the settings that made its
method behave as another (memrl.metrics.degenerate: a gate nothing passes, epochs whose
retrievals were empty, λ with no pool to rank, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from memrl.core.rundir import RunDir


class Cell(NamedTuple):
    """What the status reads of one record."""

    task_id: str
    epoch: int
    success: bool


def run_status(rd: RunDir, now: float | None = None) -> dict[str, Any]:
    """One run's summary (never raises on a damaged run: `error` says what was wrong). The
    records are streamed: only each one's task, epoch and outcome are kept."""
    from memrl.core.records import HEAVY, EpisodeRecord, iter_jsonl
    from memrl.journal.runcard import identity
    from memrl.metrics.compute import csr_curve, sr_curve, success_matrix

    now = time.time() if now is None else now
    out: dict[str, Any] = {"path": str(rd.root)}
    cells: list[Cell] = []
    records: list[EpisodeRecord] = []  # without transcripts and model calls: what the warnings read
    errored = writer_failures = 0
    recorded = 0.0
    try:
        card = json.loads(rd.card.read_text(encoding="utf-8"))
        for r in iter_jsonl(rd.episodes):
            cells.append(Cell(str(r["task_id"]), int(r["epoch"]), bool(r.get("success"))))
            errored += bool(r.get("errors"))
            # memories stored without their model-written summary (memrl.memory.writer)
            writer_failures += bool((r.get("info") or {}).get("writer_error"))
            recorded += float(r.get("cost_usd") or 0.0)
            records.append(EpisodeRecord.from_dict({k: v for k, v in r.items() if k not in HEAVY}))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    from memrl.metrics.degenerate import run_warnings

    config = card.get("config") or {}
    out.update(identity(config, card.get("model")))
    out["warnings"] = run_warnings(card, records)
    out["status"] = card.get("status") or "?"
    out["epochs"] = int((config.get("runner") or {}).get("epochs") or 0)
    out["n_tasks"] = int(card.get("n_tasks") or 0)
    out["episodes"] = len(cells)
    out["errored"] = errored
    out["writer_failures"] = writer_failures
    paid = float((card.get("llm_totals") or {}).get("cost_usd") or 0.0)
    out["spend_usd"] = recorded if recorded or not paid else paid
    out["unpriced"] = list(card.get("unpriced") or [])
    out["epochs_done"], out["last"], out["csr"] = 0, None, None
    if cells:
        tasks, epochs, S = success_matrix(cells, allow_missing=True)
        present = {(c.task_id, c.epoch) for c in cells}
        n = max(out["n_tasks"], len(tasks))
        done = 0
        for e in epochs:
            if sum((t, e) in present for t in tasks) < n:
                break
            done += 1
        out["epochs_done"] = done
        if done:
            out["last"], out["csr"] = sr_curve(S[:done])[-1], csr_curve(S[:done])[-1]
    written = [p.stat().st_mtime for p in (rd.episodes, rd.card) if p.exists()]
    out["idle_s"] = round(now - max(written), 1) if written else None
    return out


def label_rows(rows: list[dict[str, Any]], configs: list[dict[str, Any]]) -> None:
    """Set each readable row's `setting`: its method with the settings that tell it apart from
    the other runs listed (memrl.report.grouping.series_params / short_labels)."""
    from memrl.report.grouping import series_params, short_labels

    idx = [i for i, r in enumerate(rows) if "error" not in r]
    items = [(str((configs[i].get("runner") or {}).get("mode") or "train"), rows[i]["env"], rows[i]["method"],
              configs[i]) for i in idx]
    params = series_params(items)
    labels = short_labels([(f"{m}/{e}", meth, p) for (m, e, meth, _), p in zip(items, params)])
    for i, lab in zip(idx, labels):
        rows[i]["setting"] = lab


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'status':<12} {'epochs':>7} {'Last':>6} {'CSR':>6} {'errored':>8} {'writer':>7} "
            f"{'spend':>11} {'written':>9}  run")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"{'unreadable':<12} {'':>7} {'':>6} {'':>6} {'':>8} {'':>7} {'':>11} {'':>9}  "
                         f"{r['path']}: {r['error']}")
            continue
        def f(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}"

        spend = "$" + format(r["spend_usd"], ".4f") + ("+?" if r.get("unpriced") else "")
        lines.append(f"{r['status']:<12} {str(r['epochs_done']) + '/' + str(r['epochs']):>7} "
                     f"{f(r['last']):>6} {f(r['csr']):>6} {r['errored']:>8} {r.get('writer_failures', 0):>7} "
                     f"{spend:>11} {ago(r['idle_s']):>9}  "
                     f"{r['env']} / {r.get('setting') or r['method']} / seed {r['seed']}  {r['path']}")
        lines += [f"{'':<12} ! {w}" for w in r.get("warnings") or []]
    return "\n".join(lines)


def _config(rd: RunDir) -> dict[str, Any]:
    try:
        return json.loads(rd.card.read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError):
        return {}


def main(argv: Sequence[str] | None = None, prog: str = "memrl status") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="run directories or folders holding them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    missing = [d for d in args.dirs if not d.exists()]
    if missing:
        print(f"memrl: {missing[0]}: no such directory", file=sys.stderr)
        return 2
    runs = RunDir.find(args.dirs)
    rows = [run_status(rd) for rd in runs]
    label_rows(rows, [_config(rd) for rd in runs])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no run directory ({RunDir.CARD} + {RunDir.EPISODES}) under "
              + ", ".join(map(str, args.dirs)))
        return 0
    print(f"{len(rows)} run{'s' if len(rows) != 1 else ''}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m memrl.cli status"))
