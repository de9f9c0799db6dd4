"""`memrl metrics RUN_DIR`: compute a run's metrics from its episode records, write
metrics.json (and the plots), print a short summary (`--json`: every figure, as metrics.json
holds them)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from memrl.metrics.compute import ZERO_FAIL_READINGS, write_metrics
from memrl.report.plots import write_run_plots


def main(argv: Sequence[str] | None = None, prog: str = "memrl metrics") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--no-plots", action="store_true", help="write metrics.json only")
    ap.add_argument("--allow-missing", action="store_true", help="count missing (task, epoch) cells as failures")
    ap.add_argument("--forgetting-zero-fail", choices=ZERO_FAIL_READINGS, default="zero",
                    help="an epoch with no failure (FR = 0/0): count it as 0 (default) or skip it")
    ap.add_argument("--json", action="store_true", help="print every figure as JSON (what metrics.json holds)")
    args = ap.parse_args(argv)
    try:
        metrics = write_metrics(args.run_dir, allow_missing=args.allow_missing, zero_fail=args.forgetting_zero_fail)
        if not args.no_plots:
            write_run_plots(args.run_dir, args.forgetting_zero_fail)
    except (FileNotFoundError, ValueError) as exc:
        print(f"memrl metrics: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2, sort_keys=True) if args.json else summary(metrics, args.run_dir))
    return 0


def _rate(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def summary(m: dict, run_dir: Path) -> str:
    """A few lines a person reads: SR per epoch, Last, CSR, forgetting, errors, retrievals,
    whether Q predicted outcomes; where the rest is."""
    n = m.get("n_tasks", 0)
    lines = [f"{run_dir}: {n} tasks x {m.get('epochs', 0)} epochs, {m.get('n_episodes', 0)} episodes "
             f"({m.get('errored_episodes', 0)} errored)",
             "SR per epoch: " + "  ".join(f"{i}: {_rate(x)} ({round(x * n)}/{n})"
                                          for i, x in enumerate(m.get("sr") or [], 1)),
             f"Last {_rate(m.get('last'))}   CSR {_rate(m.get('csr'))}   forgetting (mean over epochs >= 2, "
             f"0/0 read as {m.get('forgetting_zero_fail')}) {_rate(m.get('forgetting_mean'))}"]
    retrieval = m.get("retrieval") or {}
    if retrieval:
        lines.append("retrievals per epoch (empty / all, mean pool): " + "  ".join(
            f"{e}: {r['empty']}/{r['retrievals']}, {_rate(r.get('mean_pool'))}" for e, r in retrieval.items()))
    qp = ((m.get("utility") or {}).get("q_prospective") or {})
    if qp.get("injections"):
        ci = qp.get("auc_ci")
        lines.append(f"Q before an episode -> its outcome: AUC {_rate(qp.get('auc'))}"
                     + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "") + f" over {qp['injections']} injections")
    lines.append(f"every figure: {Path(run_dir) / 'metrics.json'} (or --json)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
