"""The commit protocol of one run directory (docs/design.md §8): `RunJournal` commits a batch,
brings the directory back to its last commit on start, and keeps the transfer evaluation's
records and checkpoint; `Checkpoint` is what a commit leaves.

Commit protocol for one batch (paths named by `memrl.core.rundir.RunDir`):
  1. state/journal.json    <- the planned bank update (new vectors as float32 bytes), the
                             batch's records, what the commit logs (its bank-update line, the
                             texts it names) and where its lines will begin in the two logs
                             (`at`) (atomic)
  2. memories.jsonl        <- the texts the records and the update name (content-addressed:
                             idempotent; a run's bank reads its texts from this file)
  3. bank/                 <- apply the update (idempotent: absolute values)
  4. episodes.jsonl        <- append the records (fsync)
  5. bank_updates.jsonl    <- append the batch's line: Q before -> after, added, removed (fsync)
  6. state/checkpoint.json <- (epoch, batch) committed and the bank's entry count (atomic
                             write); then the journal becomes state/last_commit.json.
On start (`RunJournal.recover`): the two logs are brought back to the last commit by their
tails (memrl.journal.tail: lines past the checkpoint, from a torn or orphaned append, are
cut; a committed last batch that lost records is restored from its copy), reading and
rewriting nothing before; where the tail does not say, the whole file is read and checked
(memrl.journal.recovery: restored, or refused). The bank's entry count is checked against the
checkpoint's, and a journal newer than the checkpoint is re-applied, so a replayed commit
appends each line exactly once. A batch that never reached its journal is replayed; the
response cache makes that replay free and identical.

Grouped commits (`grouped=True`, the async schedule: one commit per episode): a commit's
journal is appended, fsynced, to `state/group.jsonl` instead of written as journal.json,
then texts, bank, records and bank-update line are written without a sync of their own and
no checkpoint follows. `sync` (every `GROUP_COMMITS` commits or `GROUP_SECONDS`, at epoch
ends, and after the run's first commit) syncs the files once for the whole group, writes the checkpoint of its last
commit and its copy, and empties group.jsonl: one fsync per episode instead of seven. On
start, the group's journals past the checkpoint are re-applied in order, exactly as a
journal.json is, so a crash (kill -9 or power loss) anywhere in a group loses nothing that
reached group.jsonl, and what did not reach it is replayed.
What the records and the logs hold is built by memrl.journal.commit_log.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from memrl.core.records import Task, append_jsonl, iter_jsonl, rewrite_jsonl, sync_file, write_json_atomic
from memrl.core.rundir import RunDir
from memrl.core.storage import writing
from memrl.journal import recovery, tail
from memrl.journal.commit_log import CommitLog, bank_update_lines
from memrl.memory.entry import BankUpdate

if TYPE_CHECKING:
    from memrl.memory.base import MemoryModule

log = logging.getLogger(__name__)


@dataclass
class Checkpoint:
    epoch: int = 1
    batch: int = -1  # last committed batch of `epoch`; -1 = none yet
    bank_entries: int | None = None  # the bank's entry count after that commit (None: unknown)

    def after(self, epoch: int, batch: int) -> bool:
        """True if (epoch, batch) is already committed."""
        return (epoch, batch) <= (self.epoch, self.batch)

    @property
    def last(self) -> tuple[int, int]:
        return (self.epoch, self.batch)

    @property
    def any_committed(self) -> bool:
        return self.batch >= 0 or self.epoch > 1


_lines = tail.record_lines
GROUP_COMMITS = 64  # grouped commits between checkpoints at most
GROUP_SECONDS = 2.0  # and at most this long after the group's first commit


def _journal_line(entry: dict[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False, sort_keys=True)


class RunJournal:
    """The journal, checkpoints and committed records of one run directory; it reaches the
    memory module only through `apply` and `entry_count` (and the bank-update line's reads,
    `CommitLog.prepare`)."""

    def __init__(self, run_dir: str | Path | RunDir, memory: "MemoryModule") -> None:
        self.rd = RunDir(run_dir)
        self.memory = memory
        self.commit_log = CommitLog(self.rd)
        self._group: list[dict[str, Any]] = []  # grouped commits since the last checkpoint
        self._group_since = 0.0

    # ------------------------------------------------------------------ training
    def load_checkpoint(self) -> Checkpoint:
        d = recovery.read_state(self.rd.checkpoint, "the checkpoint", recovery.CHECKPOINT_FIX)
        if d is None:
            return Checkpoint()
        entries = d.get("bank_entries")
        return Checkpoint(epoch=int(d["epoch"]), batch=int(d["batch"]),
                          bank_entries=None if entries is None else int(entries))

    def _write_episodes(self, records: list[dict]) -> None:
        """Replace episodes.jsonl by `records` (atomic: a temp file, fsync, rename)."""
        with writing(self.rd.episodes, "the episode records"):
            rewrite_jsonl(self.rd.episodes, records)

    def _tail_fixes(self, ckpt: Checkpoint, pending: dict[str, Any] | None,
                    copy: dict[str, Any] | None) -> list[tail.TailFix] | None:
        """How to bring both logs back to the last commit from their tails alone (None: the
        journal kept does not tell where they end, or their tails disagree with it)."""
        if not ckpt.any_committed or copy is None or "at" not in copy \
                or (int(copy["epoch"]), int(copy["batch"])) != ckpt.last:
            return None
        at = copy["at"]
        lines = {self.rd.episodes: tail.encoded(_lines(copy["records"])),
                 self.rd.bank_updates: tail.encoded(bank_update_lines(copy.get("extras")))}
        starts = {self.rd.episodes: int(at["episodes"]), self.rd.bank_updates: int(at["bank_updates"])}
        if pending is not None and pending.get("at") != {
                "episodes": starts[self.rd.episodes] + len(lines[self.rd.episodes]),
                "bank_updates": starts[self.rd.bank_updates] + len(lines[self.rd.bank_updates])}:
            return None
        fixes = []
        for path, body in lines.items():
            fix = tail.inspect(path, starts[path], body, ckpt.after)
            if fix is None:
                return None
            fixes.append(fix)
        return fixes

    def _check_records(self, ckpt: Checkpoint, last_copy: dict[str, Any] | None,
                       batches: Sequence[Sequence[Task]] | None, n_tasks: int | None,
                       asynchronous: bool) -> tuple[list[dict], int]:
        """The committed records after reading the whole file (memrl.journal.recovery): those
        of committed batches, the last one restored from its copy if cut; refused otherwise."""
        episodes = self.rd.episodes
        records = recovery.read_records(episodes) if episodes.exists() else []
        if batches is None and n_tasks is None:
            return [r for r in records if ckpt.after(int(r["epoch"]), int(r["batch"]))], 0
        if asynchronous:
            cells = recovery.async_cells(records, last_copy, ckpt.last if ckpt.any_committed else None,
                                         n_tasks or sum(map(len, batches or [])))
        else:
            cells = recovery.committed_cells(ckpt.after, batches or [], max(ckpt.epoch, 1))
        return recovery.repair_records(episodes, records, cells, ckpt.last if ckpt.any_committed else None,
                                       last_copy)

    def recover(self, batches: Sequence[Sequence[Task]] | None = None, n_tasks: int | None = None, *,
                asynchronous: bool = False) -> Checkpoint:
        """Bring the run directory to its last commit (module doc): records of committed
        batches only (the last one restored from its copy if a torn append cut it), the bank
        checked against the checkpoint, a newer journal re-applied. `batches` (batch
        schedule) or `n_tasks` (`asynchronous`: commits of one episode) say which cells are
        committed. Refuses (RunRefused) a state it cannot trust, before changing anything."""
        ckpt = self.load_checkpoint()
        journal = recovery.read_state(self.rd.journal, "the commit journal", recovery.JOURNAL_FIX)
        last_copy = recovery.read_state(self.rd.last_commit, "the last commit's copy",
                                        recovery.LAST_COMMIT_FIX)
        pending = journal is not None and not ckpt.after(journal["epoch"], journal["batch"])
        if journal is not None and not pending:  # committed; its rename to last_commit was cut
            last_copy = journal
        # the journals to re-apply, in order: a grouped commits' journal, or journal.json
        todo = [e for e in self._read_group() if not ckpt.after(int(e["epoch"]), int(e["batch"]))]
        if pending:
            todo.append(journal)
        updates = [BankUpdate.from_dict(e["update"]) for e in todo]
        fixes = self._tail_fixes(ckpt, todo[0] if todo else None, last_copy)
        if fixes is None:  # the tails do not say: read and check the whole record file
            keep, restored = self._check_records(ckpt, last_copy, batches, n_tasks, asynchronous)
        recovery.check_bank(self.memory.entry_count(), ckpt.bank_entries, where=self.rd.bank,
                            last=ckpt.last, low=sum(len(u.delete) for u in updates),
                            high=sum(len(u.add) for u in updates))
        if fixes is not None:
            for fix in fixes:
                if fix.action == "restore" and fix.path == self.rd.episodes:
                    log.warning("%s lacked records of the last committed batch (epoch %d, batch %d): "
                                "restored from its journal", fix.path, *ckpt.last)
                with writing(fix.path, "the episode records" if fix.path == self.rd.episodes
                             else "the bank-update log"):
                    fix.apply()
        else:
            if restored or self.rd.episodes.exists():  # also drops a torn last line
                self._write_episodes(keep)
            with writing(self.rd.bank_updates, "the bank-update log"):
                self.commit_log.truncate(ckpt.after)
        for entry, update in zip(todo, updates):
            log.info("recovering batch %s of epoch %s from its journal", entry["batch"], entry["epoch"])
            if entry is not journal:  # a grouped commit's journal becomes journal.json, then commits
                with writing(self.rd.journal, "the commit journal"):
                    write_json_atomic(self.rd.journal, entry, indent=None)
            self.commit(entry["epoch"], entry["batch"], update, entry["records"],
                        extras=entry.get("extras"), journal_written=True)
        if self.rd.group.exists():
            with writing(self.rd.group, "the commit journal"):
                self.rd.group.unlink()
        if todo:
            return self.load_checkpoint()
        if journal is not None:
            with writing(self.rd.last_commit, "the last commit's copy"):
                os.replace(self.rd.journal, self.rd.last_commit)
        return ckpt

    def _read_group(self) -> list[dict[str, Any]]:
        """The grouped commits' journals (a torn last line, a crash mid-append, left out)."""
        try:
            return list(iter_jsonl(self.rd.group))
        except ValueError as exc:
            raise recovery.RunRefused(f"the commit journal {self.rd.group} is corrupt ({exc}); "
                                      f"{recovery.JOURNAL_FIX}") from exc

    def commit(self, epoch: int, batch: int, update: BankUpdate, records: list[dict],
               texts: dict[str, dict[str, str]] | None = None, *,
               extras: dict[str, Any] | None = None, journal_written: bool = False,
               grouped: bool = False) -> None:
        """Commit one batch (the protocol above). `texts`: the injected memories' texts the
        records name; `extras` (recovery): what the journal says the commit logs; `grouped`:
        a grouped commit, made durable with its group by `sync` (module doc)."""
        rd = self.rd
        if not journal_written:
            extras = self.commit_log.prepare(epoch, batch, update, self.memory, texts or {},
                                             first=not rd.checkpoint.exists() and not self._group)
            at = {"episodes": tail.size_of(rd.episodes), "bank_updates": tail.size_of(rd.bank_updates)}
            entry = {"epoch": epoch, "batch": batch, "update": update.to_dict(), "records": records,
                     "extras": extras, "at": at}
            with writing(rd.journal if not grouped else rd.group, "the commit journal"):
                if grouped:
                    append_jsonl(rd.group, [_journal_line(entry)])
                else:
                    write_json_atomic(rd.journal, entry, indent=None)
        later = {"sync": False} if grouped else {}  # a grouped commit's files are synced by `sync`
        with writing(rd.memories, "the memory texts"):
            self.commit_log.write_texts(extras, **later)
        with writing(rd.bank, "the memory bank", any_error=True):
            if grouped:
                self.memory.hold()  # durable with the group (`sync`)
            self.memory.apply(update)
        with writing(rd.episodes, "the episode records"):
            append_jsonl(rd.episodes, _lines(records), **later)
        with writing(rd.bank_updates, "the bank-update log"):
            self.commit_log.write_bank_update(extras, **later)
        if grouped:
            if not self._group:
                self._group_since = time.monotonic()
            self._group.append(entry)
            if len(self._group) >= GROUP_COMMITS or time.monotonic() - self._group_since >= GROUP_SECONDS \
                    or not rd.checkpoint.exists():  # the run's first commit is checkpointed at once
                self.sync()
            return
        with writing(rd.checkpoint, "the checkpoint"):
            write_json_atomic(rd.checkpoint, {"epoch": epoch, "batch": batch,
                                              "bank_entries": self.memory.entry_count()})
        with writing(rd.last_commit, "the last commit's copy"):
            os.replace(rd.journal, rd.last_commit)

    def sync(self) -> None:
        """Make the grouped commits durable: the files they wrote synced once, the checkpoint
        of the last one and its copy written, group.jsonl emptied (module doc)."""
        if not self._group:
            return
        rd, last = self.rd, self._group[-1]
        for path, what in ((rd.memories, "the memory texts"), (rd.episodes, "the episode records"),
                           (rd.bank_updates, "the bank-update log"), (rd.launches, "the launch log")):
            with writing(path, what):
                sync_file(path)
        with writing(rd.bank, "the memory bank", any_error=True):
            self.memory.flush()
        with writing(rd.last_commit, "the last commit's copy"):
            write_json_atomic(rd.last_commit, last, indent=None)
        with writing(rd.checkpoint, "the checkpoint"):
            write_json_atomic(rd.checkpoint, {"epoch": last["epoch"], "batch": last["batch"],
                                              "bank_entries": self.memory.entry_count()})
        with writing(rd.group, "the commit journal"):
            rd.group.unlink(missing_ok=True)
        self._group = []

    # ------------------------------------------------------------ transfer eval
    def recover_eval(self) -> Checkpoint:
        """The evaluation's checkpoint, its records cut back to it (the evaluation changes no
        bank, so a batch past it is simply played again): by the file's size at that
        checkpoint when it records one, else by reading the records."""
        path = self.rd.eval_episodes
        d = recovery.read_state(self.rd.eval_checkpoint, "the evaluation checkpoint", recovery.CHECKPOINT_FIX)
        ckpt = Checkpoint(epoch=int(d["epoch"]), batch=int(d["batch"])) if d else Checkpoint()
        if not path.exists():
            return ckpt
        end = int(d["bytes"]) if d and "bytes" in d else None
        fix = tail.inspect(path, end, b"", ckpt.after) if end is not None else None
        if fix is not None:
            with writing(path, "the evaluation records"):
                fix.apply()
            return ckpt
        keep = [r for r in recovery.read_records(path) if ckpt.after(int(r["epoch"]), int(r["batch"]))]
        with writing(path, "the evaluation records"):
            rewrite_jsonl(path, keep)
        return ckpt

    def commit_eval(self, epoch: int, batch: int, records: list[dict],
                    texts: dict[str, dict[str, str]]) -> None:
        """Commit one evaluation batch: the texts its records name, the records, the
        evaluation checkpoint."""
        rd = self.rd
        with writing(rd.memories, "the memory texts"):
            self.commit_log.write_texts({"texts": texts})
        with writing(rd.eval_episodes, "the evaluation records"):
            append_jsonl(rd.eval_episodes, _lines(records))
        with writing(rd.eval_checkpoint, "the evaluation checkpoint"):
            write_json_atomic(rd.eval_checkpoint, {"epoch": epoch, "batch": batch,
                                                   "bytes": tail.size_of(rd.eval_episodes)})
