"""What a run shows while it runs: the progress bar and one plain log line per epoch.

- The bar (tqdm, on stderr) counts the epoch's tasks; its postfix (`RunTally.postfix`) shows
  the tasks solved and the errored episodes of the epoch, and this session's model retries,
  spend and tokens (what the model client paid for: cached answers cost nothing).
- `runner.progress`: `true` / `false`, or `auto` (default): the bar only when stderr is a
  terminal, so Slurm and nohup logs hold no bar redraws.
- Whatever the bar does, each finished epoch logs one line (`RunTally.epoch_line`, logger
  `memrl.control.runner`, INFO; Hydra writes it to the console and to `run.log`):

      epoch 2/10: SR 0.333 (1/3), CSR 0.667, errors 0, spend $0.0012, tokens 12.3k

  from the epoch's episode records (spend and tokens as recorded, so a replay from the
  response cache reads the same), including batches committed by an earlier session.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from memrl.control.guards import counts_against_error_rate, writer_failed
from memrl.core.records import iter_jsonl, write_json_atomic
from memrl.core.rundir import RunDir

log = logging.getLogger(__name__)


def _line_ends_at(path: Any, at: int) -> bool:
    with open(path, "rb") as fh:
        fh.seek(at - 1)
        return fh.read(1) == b"\n"


def human(n: float) -> str:
    """12345 -> '12.3k'."""
    n = float(n)
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{int(n)}"


@dataclass
class EpochTally:
    episodes: int = 0
    solved: int = 0
    errored: int = 0
    writer_failures: int = 0  # memories stored without their summary (memrl.memory.writer)
    rate_errors: int = 0  # what runner.max_error_rate counts: errored or writer failed (memrl.control.guards)
    cost_usd: float = 0.0
    tokens: int = 0


@dataclass
class RunTally:
    """Per-epoch counts of a run's episode records, kept up to date commit by commit."""

    n_tasks: int
    epochs: dict[int, EpochTally] = field(default_factory=dict)
    solved_by: dict[str, int] = field(default_factory=dict)  # task id -> first epoch solved

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        for r in records:
            e = int(r["epoch"])
            t = self.epochs.setdefault(e, EpochTally())
            t.episodes += 1
            t.solved += int(bool(r.get("success")))
            t.errored += int(bool(r.get("errors")))
            t.writer_failures += int(writer_failed(r))
            t.rate_errors += int(counts_against_error_rate(r))
            t.cost_usd += float(r.get("cost_usd") or 0.0)
            tokens = r.get("tokens") or {}  # reasoning and cached tokens are parts of these two
            t.tokens += int(tokens.get("prompt", 0) or 0) + int(tokens.get("completion", 0) or 0)
            if r.get("success"):
                tid = str(r["task_id"])
                self.solved_by[tid] = min(self.solved_by.get(tid, e), e)

    def to_dict(self) -> dict[str, Any]:
        return {"epochs": {str(e): asdict(t) for e, t in sorted(self.epochs.items())},
                "solved_by": dict(self.solved_by)}

    def load(self, d: Mapping[str, Any]) -> None:
        self.epochs = {int(e): EpochTally(**t) for e, t in (d.get("epochs") or {}).items()}
        self.solved_by = {str(t): int(e) for t, e in (d.get("solved_by") or {}).items()}

    def episodes(self) -> int:
        return sum(t.episodes for t in self.epochs.values())

    def save(self, run_dir: RunDir) -> None:
        """Keep the counts with the size of the records they cover (`state/tally.json`), at an
        epoch end: a resumed or relaunched run reads only the records after it (`resume`)."""
        size = run_dir.episodes.stat().st_size if run_dir.episodes.exists() else 0
        write_json_atomic(run_dir.tally, {"bytes": size, "tally": self.to_dict()}, indent=None)

    def resume(self, run_dir: RunDir) -> tuple[int, int]:
        """Take the committed records' counts: those saved at the last epoch end, plus the
        records after it (all of them when nothing fits). Returns (episodes counted, the
        byte where the unsaved records begin)."""
        start = 0
        path = run_dir.episodes
        size = path.stat().st_size if path.exists() else 0
        try:
            saved = json.loads(run_dir.tally.read_text(encoding="utf-8")) if run_dir.tally.exists() else None
            at = int(saved["bytes"]) if saved else 0
            if saved and 0 < at <= size and _line_ends_at(path, at):
                self.load(saved["tally"])
                start = at
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s does not fit (%s): counting every record", run_dir.tally, exc)
            self.epochs, self.solved_by, start = {}, {}, 0
        self.add(iter_jsonl(path, start))
        return self.episodes(), start

    def epoch(self, e: int) -> EpochTally:
        return self.epochs.get(e, EpochTally())

    def csr(self, e: int) -> float:
        return sum(1 for first in self.solved_by.values() if first <= e) / max(1, self.n_tasks)

    def postfix(self, e: int, llm_totals: Mapping[str, Any] | None) -> dict[str, str]:
        """The bar's postfix: the epoch's solved and errored episodes, this session's model
        retries, spend and tokens."""
        t = self.epoch(e)
        out = {"solved": str(t.solved), "errors": str(t.errored)}
        if llm_totals:
            out["retries"] = str(int(llm_totals.get("retries", 0)))
            out["spend"] = f"${float(llm_totals.get('cost_usd', 0.0)):.4f}"
            out["tokens"] = human(int(llm_totals.get("prompt_tokens", 0))
                                  + int(llm_totals.get("completion_tokens", 0)))
        return out

    def epoch_line(self, e: int, of: int) -> str:
        t = self.epoch(e)
        sr = t.solved / t.episodes if t.episodes else 0.0
        return (f"epoch {e}/{of}: SR {sr:.3f} ({t.solved}/{t.episodes}), CSR {self.csr(e):.3f}, "
                f"errors {t.errored}, spend ${t.cost_usd:.4f}, tokens {human(t.tokens)}")
