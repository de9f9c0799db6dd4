"""The numbers behind the MemRL page, one `RunView` per run directory, all from what the run
recorded: its episode records, its bank-update log (memrl.journal.banklog) and its memory texts
(memrl.journal.memtexts). Nothing is rebuilt from the final bank; a run from before the log simply
has no bank panels (`RunView.has_log` is false) and the page says so.

Records are read without their transcripts and model calls (the page shows neither), and the
memory texts are read only for the memories a page shows, a group of tasks at a time
(`task_memories`), from the indexed text file: a paper-scale run never has all its texts in
memory at once.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Mapping

import numpy as np

from memrl.core.records import EpisodeRecord
from memrl.core.rundir import RunDir
from memrl.journal.banklog import BankHistory
from memrl.memory.textstore import TextStore
from memrl.journal.runcard import identity, identity_label
from memrl.metrics.compute import (calibration, csr_curve, forgetting_curve, mean_injected_q, q_bins, sr_curve,
                                   success_matrix)
from memrl.metrics.utility import q_prospective


_USED = ("task_id", "epoch", "batch", "q", "sim", "success", "outcome")  # one injection of a memory


@dataclass
class RunView:
    rd: RunDir
    ident: dict[str, str]
    status: str
    records: list[EpisodeRecord]
    history: BankHistory
    texts: Mapping[str, dict[str, str]] | TextStore  # hash -> {"intent", "experience"}
    config: dict[str, Any] = field(default_factory=dict)
    task_ids: list[str] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    S: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    card: dict[str, Any] = field(default_factory=dict)  # the run card, without its config
    marks: list[str] = field(default_factory=list)  # why it is shown only under a flag
    display: str = ""  # its label among the runs shown (memrl.view.labels.assign_labels)
    series: str = ""  # the same without its seed: what its seeds share (colour, marker, dash)

    @classmethod
    def load(cls, run_dir: str | RunDir) -> "RunView":
        from memrl.report.runs import digested_records

        rd = RunDir(run_dir)
        card = json.loads(rd.card.read_text(encoding="utf-8"))
        records, digest = digested_records(rd.episodes)  # no transcript held: a page of a long run stays small
        view = cls(rd=rd, ident=identity(card.get("config") or {}, card.get("model")),
                   status=str(card.get("status") or "?"), records=records,
                   history=BankHistory.read(rd), texts=TextStore(rd.memories, read_only=True),
                   config=card.get("config") or {},
                   card={k: v for k, v in card.items() if k != "config"})
        view.__dict__["episodes"] = digest  # the cached property, taken while the records were read
        if records:
            view.task_ids, view.epochs, view.S = success_matrix(records, allow_missing=True)
        return view

    # ------------------------------------------------------------------ naming
    @property
    def label(self) -> str:
        """Its label among the runs on the page (the method with the settings that tell it
        apart, its seed where seeds differ, its marks), else env / method / model / seed."""
        return self.display or identity_label(self.ident)

    # what memrl.report.inputs and memrl.report.replicates read of a run
    @property
    def path(self) -> Any:
        return self.rd.root

    @property
    def env(self) -> str:
        return self.ident["env"]

    @property
    def mode(self) -> str:
        return str((self.config.get("runner") or {}).get("mode") or "train")

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0) or 0)

    @property
    def unfinished(self) -> str | None:
        """Why the run is not finished (its status, or fewer complete epochs than planned)."""
        from memrl.report.runs import complete_epochs

        planned = int((self.config.get("runner") or {}).get("epochs") or 0)
        done = complete_epochs(self.records, int(self.card.get("n_tasks") or 0))
        why = [f"status {self.status}"] if self.status != "finished" else []
        if planned and done < planned:
            why.append(f"{done} of {planned} epochs complete")
        return ", ".join(why) or None

    @cached_property
    def episodes(self) -> Any:
        from memrl.report.replicates import Episodes

        return Episodes.of(self.records)

    @property
    def method(self) -> str:
        return self.ident["method"]

    @property
    def has_log(self) -> bool:
        return self.history.covers(self.records)

    # ------------------------------------------------------------------ success
    def grid(self) -> dict[str, Any]:
        """Task × epoch: 1 success, 0 failure, -1 errored (an env, model or judge error),
        None missing; with the outcome per cell for the hover text."""
        cell: dict[tuple[str, int], EpisodeRecord] = {}
        for r in self.records:
            cell[(r.task_id, int(r.epoch))] = r
        z, text = [], []
        for t in self.task_ids:
            row, trow = [], []
            for e in self.epochs:
                r = cell.get((t, e))
                if r is None:
                    row.append(None)
                    trow.append("no record")
                    continue
                row.append(1 if r.success else (-1 if r.outcome.endswith("_error") else 0))
                trow.append(f"{r.outcome} ({r.outcome_detail})" if r.outcome_detail else r.outcome)
            z.append(row)
            text.append(trow)
        return {"tasks": self.task_ids, "epochs": self.epochs, "z": z, "text": text}

    def curves(self) -> dict[str, list[float]]:
        if not self.records:
            return {"sr": [], "csr": [], "forgetting": []}
        return {"sr": sr_curve(self.S), "csr": csr_curve(self.S), "forgetting": forgetting_curve(self.S)}

    # ------------------------------------------------------------------ the bank
    def x_of(self, epoch: int, batch: int) -> float:
        """A commit's place on a continuous epoch axis: epoch e's batches spread over (e-1, e]."""
        n = self.batches_per_epoch
        return (epoch - 1) + (batch + 1) / n

    @cached_property
    def batches_per_epoch(self) -> int:
        per: Counter[int] = Counter()
        for e, _ in {(int(r.epoch), int(r.batch)) for r in self.records}:
            per[e] += 1
        return max(per.values(), default=1)

    def bank_sizes(self) -> list[tuple[float, int]]:
        return [(self.x_of(e, b), s) for e, b, s in self.history.sizes()]

    def injections(self) -> Counter[str]:
        return Counter(str(m["id"]) for r in self.records for m in r.injected)

    def top_trajectories(self, k: int = 8) -> list[dict[str, Any]]:
        """The Q trajectories of the k most-injected memories (from the bank-update log)."""
        traj = self.history.trajectories()
        out = []
        for mid, n in self.injections().most_common():
            if mid not in traj:
                continue
            pts = traj[mid]
            out.append({"id": mid, "injected": n, "x": [self.x_of(e, b) for e, b, _ in pts],
                        "q": [q for _, _, q in pts]})
            if len(out) == k:
                break
        return out

    def q_per_epoch(self) -> dict[int, list[float]]:
        if not self.has_log:
            return {}
        ends = self.history.q_at_epoch_end()
        return {e: sorted(ends[e].values()) for e in self.epochs if e in ends}

    def calibration(self) -> list[dict[str, Any]]:
        pairs = [(q, bool(r.success)) for r in self.records if (q := mean_injected_q(r)) is not None]
        if not pairs:
            return []
        rows = calibration([q for q, _ in pairs], [ok for _, ok in pairs], q_bins([q for q, _ in pairs]))
        return [r for r in rows if r["n_episodes"]]

    # ------------------------------------------------------------------ one task's memories
    def task_memories(self, tasks: Iterable[str] | None = None, *,
                      with_texts: bool = True) -> dict[str, list[dict[str, Any]]]:
        """Per task id (of `tasks`, default all): the memories its episodes wrote, each with its
        text, Q over time and the episodes it was injected into (helped: the episode succeeded;
        hurt: it failed). The texts are read for these memories only (`with_texts=False`: none)."""
        every = self._memories
        ids = list(every) if tasks is None else [t for t in tasks if t in every]
        out = {t: [{**m, "used": [dict(zip(_USED, u)) for u in m["used"]]} for m in every[t]] for t in ids}
        for ms in out.values():
            for m in ms:
                for u in m["used"]:
                    u["effect"] = "helped" if u.pop("success") else "hurt"
        mems = [m for ms in out.values() for m in ms]
        if with_texts:
            self.texts_of(mems)
        for m in mems:
            m.pop("text", None)
        return out

    @cached_property
    def _memories(self) -> dict[str, list[dict[str, Any]]]:
        """`task_memories` of every task without texts (each memory's text hash in `text`, its
        injections as `_USED` tuples)."""
        written: dict[str, list[dict[str, Any]]] = defaultdict(list)
        added = {str(a["id"]): a for line in self.history.lines for a in line.get("added") or []}
        for r in self.records:
            if r.written:
                a = added.get(r.written, {})
                written[r.task_id].append({"id": r.written, "epoch": int(r.epoch),
                                           "success": bool(r.success), "kind": a.get("kind", ""),
                                           "experience": None, "text": a.get("text"), "used": []})
        by_id = {m["id"]: m for ms in written.values() for m in ms}
        traj = self.history.trajectories()
        removed = self.history.removed()
        for r in self.records:
            for m in r.injected:
                mem = by_id.get(str(m["id"]))
                if mem is None:
                    continue
                mem["used"].append((r.task_id, int(r.epoch), int(r.batch), m.get("q"), m.get("sim"),
                                    bool(r.success), r.outcome))  # `_USED`: a tuple, not a dict, per injection
        for mid, mem in by_id.items():
            mem["q_path"] = [round(q, 4) for _, _, q in traj.get(mid, [])]
            mem["removed"] = list(removed[mid]) if mid in removed else None
            mem["helped"] = sum(u[5] for u in mem["used"])
            mem["hurt"] = len(mem["used"]) - mem["helped"]
        return dict(written)

    def texts_of(self, memories: Iterable[dict[str, Any]]) -> None:
        """Fill each memory's `experience` from its text hash (`text`), reading only those."""
        memories = list(memories)
        hashes = [str(m["text"]) for m in memories if m.get("text")]
        if isinstance(self.texts, TextStore):
            found = self.texts.get_many(hashes)
        else:
            found = {h: self.texts[h] for h in hashes if h in self.texts}
        for m in memories:
            t = found.get(str(m.get("text")))
            m["experience"] = t["experience"] if t else None

    def summary(self) -> dict[str, Any]:
        c = self.curves()
        errored = sum(1 for r in self.records if r.errors)
        return {"run": self.label, "path": str(self.rd.root), "status": self.status,
                "tasks": len(self.task_ids), "epochs": len(self.epochs),
                "episodes": len(self.records), "errored": errored,
                "last": c["sr"][-1] if c["sr"] else math.nan,
                "csr": c["csr"][-1] if c["csr"] else math.nan,
                "spend": sum(float(r.cost_usd or 0.0) for r in self.records),
                "bank_log": self.has_log, "q_prospective": q_prospective(self.records)}
