"""`bank_updates.jsonl`: what each commit did to the memory bank, one line per batch.

A bank keeps only each memory's current Q; this log keeps its history. The runner appends
one line per committed batch (memrl.journal.commit_log.CommitLog, as part of the commit protocol:
after the episode records, before the checkpoint), for every memory module (a module
without a bank writes empty lines):

    {"epoch": 1, "batch": 0,
     "updates": [{"id", "q_before", "q_after", "visits_before", "visits_after"[, "text"]}],
     "added":   [{"id", "q", "visits", "task_id", "kind", "success", "text"}],
     "removed": ["id", ...],
     "size": 12,                       # entries in the bank after the batch (null: no bank)
     "initial": [{"id", "q", "visits", "text"}]}   # first line only: what the bank held
                                                   # before the run's first commit (init_from)

`text` is the memory's content hash (memrl.journal.memtexts; resolved by `memories.jsonl`); an
update carries it when the batch revised the memory's experience. Q before is read from the
bank when the update is planned (before it is applied), so it is exact.

The read side (`BankHistory`) replays the lines: the bank's Q values at the end of every
epoch, each memory's Q trajectory, the bank size over time. A run started before this log
existed has no file, or one that begins after its first batches (it was resumed by newer
code): `BankHistory.covers` says whether the log holds every committed batch; where it does
not, callers fall back to what the episode records allow (memrl.cli.bank.q_per_epoch) and
say so.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.journal.memtexts import text_entry

if TYPE_CHECKING:
    from memrl.memory.base import MemoryModule
    from memrl.memory.entry import BankUpdate


# ------------------------------------------------------------------------------ write side
def plan_line(epoch: int, batch: int, update: "BankUpdate", memory: "MemoryModule", *,
              first: bool) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """The log line of one batch's planned update, and the texts it names (hash -> text).
    Call it before the update is applied: Q before comes from the bank as it is."""
    texts: dict[str, dict[str, str]] = {}
    changed = sorted(update.set_fields)
    before = memory.bank_state(changed) or {}
    updates = []
    for mid in changed:
        fields = update.set_fields[mid]
        was = before.get(mid, {})
        row: dict[str, Any] = {
            "id": mid,
            "q_before": was.get("q"), "q_after": float(fields["q"]) if "q" in fields else was.get("q"),
            "visits_before": was.get("visits"),
            "visits_after": int(fields["visits"]) if "visits" in fields else was.get("visits")}
        if "experience" in fields:
            h, t = text_entry(str(was.get("intent", "")), str(fields["experience"]))
            texts[h] = t
            row["text"] = h
        updates.append(row)
    added = []
    for e in update.add:
        h, t = text_entry(e.intent, e.experience)
        texts[h] = t
        added.append({"id": e.memory_id, "q": float(e.q), "visits": int(e.visits),
                      "task_id": e.task_id, "kind": e.kind, "success": bool(e.success), "text": h})
    size = memory.bank_size()
    line: dict[str, Any] = {
        "epoch": int(epoch), "batch": int(batch), "updates": updates, "added": added,
        "removed": sorted(update.delete),
        "size": None if size is None else size + len(update.add) - len(update.delete)}
    if first:
        initial = memory.bank_state(None) or {}
        rows = []
        for mid, st in initial.items():
            h, t = text_entry(str(st.get("intent", "")), str(st.get("experience", "")))
            texts[h] = t
            rows.append({"id": mid, "q": st.get("q"), "visits": st.get("visits"), "text": h})
        line["initial"] = rows
    return line, texts


# ------------------------------------------------------------------------------ read side
@dataclass
class BankHistory:
    """The replayed bank-update log of one run."""

    lines: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, run_dir: str | RunDir) -> "BankHistory":
        return cls(list(iter_jsonl(RunDir(run_dir).bank_updates)))

    def __bool__(self) -> bool:
        return bool(self.lines)

    def batches(self) -> set[tuple[int, int]]:
        return {(int(x["epoch"]), int(x["batch"])) for x in self.lines}

    def covers(self, records: Iterable[dict[str, Any] | Any]) -> bool:
        """True when the log has a line for every committed batch of these episode records
        (dicts or EpisodeRecords) and its first line is the run's first batch."""
        if not self.lines or "initial" not in self.lines[0]:
            return False
        have = self.batches()
        for r in records:
            e, b = (r["epoch"], r["batch"]) if isinstance(r, dict) else (r.epoch, r.batch)
            if (int(e), int(b)) not in have:
                return False
        return True

    def replay(self) -> Iterable[tuple[dict[str, Any], dict[str, float]]]:
        """(line, Q of every memory in the bank after it) for each line in order."""
        state: dict[str, float] = {}
        for i, line in enumerate(self.lines):
            if i == 0:
                for row in line.get("initial") or []:
                    state[str(row["id"])] = float(row.get("q") or 0.0)
            for mid in line.get("removed") or []:
                state.pop(str(mid), None)
            for row in line.get("added") or []:
                state[str(row["id"])] = float(row.get("q") or 0.0)
            for row in line.get("updates") or []:
                if row.get("q_after") is not None and str(row["id"]) in state:
                    state[str(row["id"])] = float(row["q_after"])
            yield line, state

    def q_at_epoch_end(self) -> dict[int, dict[str, float]]:
        """epoch -> {memory id: Q} of the bank at the end of that epoch."""
        out: dict[int, dict[str, float]] = {}
        for line, state in self.replay():
            out[int(line["epoch"])] = dict(state)  # the epoch's last line wins
        return dict(sorted(out.items()))

    def trajectories(self) -> dict[str, list[tuple[int, int, float]]]:
        """memory id -> [(epoch, batch, Q after that batch)], from its addition (or the run's
        start for an initial entry) on, one point per batch that set its Q."""
        out: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
        for i, line in enumerate(self.lines):
            e, b = int(line["epoch"]), int(line["batch"])
            if i == 0:
                for row in line.get("initial") or []:
                    out[str(row["id"])].append((e, b - 1, float(row.get("q") or 0.0)))
            for row in line.get("added") or []:
                out[str(row["id"])].append((e, b, float(row.get("q") or 0.0)))
            for row in line.get("updates") or []:
                if row.get("q_after") is not None:
                    out[str(row["id"])].append((e, b, float(row["q_after"])))
        return dict(out)

    def sizes(self) -> list[tuple[int, int, int]]:
        """[(epoch, batch, bank size after the batch)] where the module has a bank."""
        return [(int(x["epoch"]), int(x["batch"]), int(x["size"])) for x in self.lines
                if x.get("size") is not None]

    def removed(self) -> dict[str, tuple[int, int]]:
        """memory id -> (epoch, batch) of the batch that removed it."""
        return {str(mid): (int(x["epoch"]), int(x["batch"])) for x in self.lines
                for mid in x.get("removed") or []}
