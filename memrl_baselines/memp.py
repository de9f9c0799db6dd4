"""MemP (Fang et al. 2025, "MemP: Exploring Agent Procedural Memory"; docs/design.md §6): procedural
memory with three independent axes, each a setting.

Build (what one episode stores):
- `trajectory`         the raw trajectory ('> action / observation' lines).
- `script`             a short numbered procedure the model writes from the trajectory.
- `proceduralization`  both: the procedure, then the trajectory it came from.

Retrieve (which k memories an episode sees; k = the benchmark's k2, 3 for ALFWorld):
- `query`            top-k by cosine similarity of the task intent to the stored intents.
- `keyword_average`  the model lists a few key words of the task; the query vector is the
                     normalised mean of the key words' embeddings. A stored memory is keyed
                     the same way: on the key words the model lists for *its* task intent
                     (the same prompt), so query and keys live in one space. Key words need
                     the model, which `retrieve` (main thread) does not have, so this mode
                     retrieves in `select` (the episode's worker thread, before the
                     episode); the bank is still the one of batch start (updates are applied
                     only after the whole batch). A failed key-word call falls back to the
                     whole intent as the single key word.
- `random`           k memories drawn uniformly without replacement, seeded by the `seed`
                     argument of `retrieve` only (same bank + same seed = same memories).

Update (what a finished episode changes):
- `vanilla`      every episode adds its memory.
- `validation`   only successful episodes add theirs.
- `adjustment`   successes add theirs; a failed episode revises the memories it used: the
                 model rewrites each one's procedure in light of the failed attempt
                 (`digest`, worker thread), and `plan_update` turns that into the memory's new
                 absolute experience text (`set_fields {id: {"experience": ...}}`; the id,
                 key and provenance stay). When several failures of one batch revise the
                 same memory, the last in task order wins (with batch size 1 there is only
                 one).

Deprecation (all update modes, on by default): `visits` counts the episodes a memory was
injected into ("hits") and `extra["successes"]` those of them that succeeded. After a
batch, a memory it used with hits >= `min_hits` and successes / hits < `min_success_rate`
is deleted. Only memories used in the batch can cross the threshold, so only they are
checked.

Bookkeeping (`MemoryEntry`): `visits` = hits; `extra` = {successes, script (the
procedure, '' when none), trajectory (the stored trajectory text, '' when none), keywords
(the key words the key was built from; keyword_average only), revisions (times revised)}.
`q` stays 0: MemP learns no utilities, and it is not MemRL with alpha = 0. The prompts are
plain text that ends where the model should continue, so base models work.

Errored episodes (a model call failed) teach nothing unless `learn_from_errors` is set.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.llm.base import LLMError, ModelProbe
from memrl.memory.bank import BankSettings
from memrl.memory.base import BankedMemory, LearnItem, NewMemory
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.core.memory_record import ACTION_PREFIX, memrl_text
from memrl.memory.writer import SAMPLE_ATTEMPT, format_trajectory

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM
    from memrl.llm.embed import Embedder

PURPOSE_SCRIPT = "memp-script"
PURPOSE_KEYWORDS = "memp-keywords"
PURPOSE_ADJUST = "memp-adjust"
# each call's answer budget, as the config spells it (named by a budget that ran out)
_KEYS = {PURPOSE_SCRIPT: "memory.writer.script_max_tokens", PURPOSE_KEYWORDS: "memory.writer.keyword_max_tokens",
         PURPOSE_ADJUST: "memory.writer.adjust_max_tokens"}

# ------------------------------------------------------------------------------- prompts
SCRIPT_PROMPT = """Below is one attempt by an agent at a task. \
Turn it into a procedure that an agent could follow on other tasks of the same kind.

Task: {intent}
Result: {result}
Attempt:
{trajectory}

Write the procedure as a few short numbered steps, one line each. Speak of kinds of things and places rather than \
particular numbered ones, keep the steps that moved the task forward and drop the wasted ones.{hint}
Procedure:
1."""

SCRIPT_FAILURE_HINT = " The attempt did not succeed, so write the steps that should have been taken."

KEYWORD_PROMPT = """Pick out the key words of a task: the objects, places and actions that matter for doing it. \
Write at most {n} of them on one line, separated by commas.

Task: heat some bread and put it on the table.
Key words: heat, bread, table

Task: {intent}
Key words:"""

ADJUST_PROMPT = """An agent was given the remembered procedure below for a new task, and the attempt failed. \
Rewrite the procedure so that following it would avoid this failure, while keeping it general enough for other \
tasks of its kind.

Remembered procedure (first written for: {memory_intent}):
{memory_text}

New task: {intent}
Failed attempt:
{trajectory}

Write the corrected procedure as a few short numbered steps, one line each.
Corrected procedure:
1."""

_STEP = re.compile(r"^\s*\d+\s*[.)]")


# ---------------------------------------------------------------------------- settings
class DeprecationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    min_hits: int = Field(3, ge=1, description="only memories injected at least this often are judged")
    min_success_rate: float = Field(0.5, ge=0.0, le=1.0,
                                    description="a judged memory below this success rate is deleted")


class MemPWriterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_trajectory_chars: int = Field(3000, ge=0)
    max_memory_chars: int = Field(3000, ge=0, description="memory text quoted in the adjustment prompt")
    script_max_tokens: int = Field(200, ge=1)
    keyword_max_tokens: int = Field(32, ge=1)
    adjust_max_tokens: int = Field(200, ge=1)
    max_script_lines: int = Field(8, ge=1)


class MemPSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "memp"
    build: Literal["trajectory", "script", "proceduralization"] = "proceduralization"
    retrieve: Literal["query", "keyword_average", "random"] = "query"
    update: Literal["vanilla", "validation", "adjustment"] = "adjustment"
    k: int = Field(ge=1, description="memories injected (the benchmark's k2: configs/memory/memp.yaml "
                   "reads env.retrieval.k2)")
    max_keywords: int = Field(5, ge=1, description="retrieve=keyword_average: key words the model "
                              "lists per task")
    adjust_limit: int | None = Field(None, ge=1, description="a failure revises at most this many of "
                                     "the memories it used (in injection order); null = all")
    learn_from_errors: bool = False  # an episode whose model call failed teaches nothing
    deprecation: DeprecationSettings = DeprecationSettings()
    writer: MemPWriterSettings = MemPWriterSettings()
    bank: BankSettings = BankSettings()


# ------------------------------------------------------------------------- pure parts
def parse_keywords(reply: str, max_keywords: int) -> list[str]:
    """Key words from the first non-empty line of a reply: split on commas / semicolons,
    trimmed, lower-cased, de-duplicated, at most `max_keywords`."""
    line = next((ln for ln in reply.splitlines() if ln.strip()), "")
    out: list[str] = []
    for part in re.split(r"[,;]", line):
        word = part.strip().strip(".:\"'`*-").strip().lower()
        if word and word not in out:
            out.append(word)
        if len(out) >= max_keywords:
            break
    return out


def parse_procedure(reply: str, max_lines: int) -> str:
    """A numbered procedure from a reply that continues after '1.': the first line is step 1;
    later lines are kept while they look like numbered steps that do not repeat an earlier
    one (small base models tend to loop)."""
    lines = [ln.strip() for ln in reply.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    steps = ["1. " + re.sub(r"^(1\s*[.)])?[\s.]*", "", lines[0])]
    seen = {_STEP.sub("", steps[0]).strip(" .").lower()}
    for ln in lines[1:]:
        body = _STEP.sub("", ln).strip(" .").lower()
        if not _STEP.match(ln) or len(steps) >= max_lines or body in seen:
            break  # not a step, enough steps, or a model starting to loop
        seen.add(body)
        steps.append(ln)
    return "\n".join(steps)


def compose_entry(intent: str, success: bool, procedure: str, trajectory: str) -> tuple[str, dict[str, Any]]:
    """The stored text (task, outcome, then the procedure and/or the trajectory) and its
    record (memrl.core.memory_record)."""
    text, record = memrl_text(intent, solved=success, notes=f"Procedure:\n{procedure}" if procedure else "",
                              note=procedure or None, note_kind="procedure", heading="Trajectory:",
                              trajectory=trajectory, actions=trajectory.startswith(ACTION_PREFIX))
    return text, record.to_dict()


def compose_experience(intent: str, success: bool, procedure: str, trajectory: str) -> str:
    """The stored text of `compose_entry`."""
    return compose_entry(intent, success, procedure, trajectory)[0]


def is_deprecated(hits: int, successes: int, s: DeprecationSettings) -> bool:
    return s.enabled and hits >= s.min_hits and successes / hits < s.min_success_rate


# ------------------------------------------------------------------------------ module
class MemPMemory(BankedMemory):
    name = "memp"
    Settings = MemPSettings

    def __init__(self, settings: MemPSettings, *, bank_dir: str | Path, embedder: "Embedder"):
        super().__init__(settings, bank_dir=bank_dir, embedder=embedder)
        self.needs_llm = (settings.build != "trajectory" or settings.retrieve == "keyword_average"
                          or settings.update == "adjustment")
        # What `select` handed each running episode (its memories, key words, key-word error),
        # for `digest` in the same worker thread. Task ids are unique within a run.
        self._episodes: dict[str, tuple[list[RetrievedMemory], list[str] | None, str | None]] = {}
        self._lock = threading.Lock()
        self._seeds: dict[str, int] = {}  # retrieval seeds of keyword_average tasks, for `select`

    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        return {"build": self.s.build, "retrieve": self.s.retrieve, "update": self.s.update,
                "k": self.s.k}

    # ------------------------------------------------------------------ keys
    def _embed(self, text: str) -> np.ndarray:
        return np.asarray(self.embedder.embed([text])[0], dtype=np.float32)

    def keyword_key(self, keywords: list[str]) -> np.ndarray:
        """The normalised mean of the key words' embeddings."""
        vecs = np.asarray(self.embedder.embed(list(keywords)), dtype=np.float32)
        mean = vecs.mean(axis=0)
        norm = float(np.linalg.norm(mean))
        if norm < 1e-8:  # key words that cancel out: embed them as one text instead
            return self._embed(" ".join(keywords))
        return (mean / norm).astype(np.float32)

    def extract_keywords(self, intent: str, llm: "EpisodeLLM | None") -> tuple[list[str], str | None]:
        """(key words, error). Without an answer the whole intent is the one key word."""
        error = None
        words: list[str] = []
        if llm is not None:
            prompt = KEYWORD_PROMPT.format(n=self.s.max_keywords, intent=intent.strip())
            try:
                words = parse_keywords(llm.complete(prompt, purpose=PURPOSE_KEYWORDS,
                                                    max_tokens=self.s.writer.keyword_max_tokens,
                                                    stop=("\n",), budget_key=_KEYS[PURPOSE_KEYWORDS]),
                                       self.s.max_keywords)
            except LLMError as exc:
                error = f"keywords: {exc}"
        return (words or [intent.strip()]), error

    # -------------------------------------------------------------- retrieve
    @staticmethod
    def _as_retrieved(entry: MemoryEntry, sim: float) -> RetrievedMemory:
        return entry.retrieved(sim, sim)

    def nearest(self, key: np.ndarray, seed: int = 0) -> list[RetrievedMemory]:
        """The k most similar memories; ties by the bank's rule (`memory.bank.ties`, drawn from
        the retrieval's `seed` when random)."""
        return [self._as_retrieved(e, s) for e, s in self.bank.query(key, self.s.k, seed=seed)]

    def random_memories(self, task: Task, seed: int) -> list[RetrievedMemory]:
        entries = list(self.bank.iter_entries())
        if not entries:
            return []
        rng = np.random.default_rng(seed)
        picked = [entries[i] for i in rng.choice(len(entries), size=min(self.s.k, len(entries)),
                                                 replace=False)]
        keyed = self.bank.get([e.memory_id for e in picked], with_embeddings=True)
        q = self._embed(task.intent)
        return [self._as_retrieved(e, float(np.dot(q, np.asarray(keyed[e.memory_id].embedding,
                                                                 dtype=np.float32))))
                for e in picked]

    def retrieve(self, task: Task, *, seed: int = 0) -> list[RetrievedMemory]:
        if self.s.retrieve == "random":
            return self.random_memories(task, seed)
        if self.s.retrieve == "keyword_average":
            with self._lock:
                self._seeds[task.task_id] = seed  # `select` ranks with the same draw
            return []  # needs the model: done in `select`
        return self.nearest(self._embed(task.intent), seed)

    def select(self, task: Task, candidates: list[RetrievedMemory], *,
               llm: "EpisodeLLM | None") -> list[RetrievedMemory]:
        keywords, error = None, None
        if self.s.retrieve == "keyword_average":
            keywords, error = self.extract_keywords(task.intent, llm)
            with self._lock:
                seed = self._seeds.pop(task.task_id, 0)
            candidates = self.nearest(self.keyword_key(keywords), seed)
        with self._lock:
            self._episodes[task.task_id] = (list(candidates), keywords, error)
        return candidates

    # ---------------------------------------------------------------- digest
    def _ask(self, llm: "EpisodeLLM | None", prompt: str, purpose: str,
             max_tokens: int) -> tuple[str, str | None]:
        if llm is None:
            return "", None
        try:
            reply = llm.complete(prompt, purpose=purpose, max_tokens=max_tokens, stop=("\n\n",),
                                 budget_key=_KEYS[purpose])
        except LLMError as exc:
            return "", f"{purpose}: {exc}"
        return parse_procedure(reply, self.s.writer.max_script_lines), None

    @staticmethod
    def script_prompt(intent: str, success: bool, trajectory: str) -> str:
        return SCRIPT_PROMPT.format(
            intent=intent.strip(), trajectory=trajectory or "(no actions)",
            result="the task was completed" if success else "the task was not completed",
            hint="" if success else SCRIPT_FAILURE_HINT)

    def write_script(self, intent: str, result: EpisodeResult, trajectory: str,
                     llm: "EpisodeLLM | None") -> tuple[str, str | None]:
        prompt = self.script_prompt(intent, result.success, trajectory)
        return self._ask(llm, prompt, PURPOSE_SCRIPT, self.s.writer.script_max_tokens)

    def model_probes(self, task: Task) -> list[Any]:
        """Each kind of call the configured variant makes (memrl.control.preflight)."""
        w, out = self.s.writer, []
        if self.s.retrieve == "keyword_average":
            out.append(ModelProbe(role="llm", purpose=PURPOSE_KEYWORDS, stop=("\n",),
                                  prompt=KEYWORD_PROMPT.format(n=self.s.max_keywords, intent=task.intent.strip()),
                                  answer_tokens=w.keyword_max_tokens, budget_key=_KEYS[PURPOSE_KEYWORDS]))
        if self.s.build != "trajectory":
            out.append(ModelProbe(role="llm", purpose=PURPOSE_SCRIPT, stop=("\n\n",),
                                  prompt=self.script_prompt(task.intent, False, SAMPLE_ATTEMPT),
                                  answer_tokens=w.script_max_tokens, budget_key=_KEYS[PURPOSE_SCRIPT]))
        if self.s.update == "adjustment":
            out.append(ModelProbe(role="llm", purpose=PURPOSE_ADJUST, stop=("\n\n",),
                                  prompt=ADJUST_PROMPT.format(memory_intent=task.intent.strip(),
                                                              memory_text="1. Look around.",
                                                              intent=task.intent.strip(),
                                                              trajectory=SAMPLE_ATTEMPT),
                                  answer_tokens=w.adjust_max_tokens, budget_key=_KEYS[PURPOSE_ADJUST]))
        return out

    def revise(self, memory: RetrievedMemory, intent: str, trajectory: str,
               llm: "EpisodeLLM | None") -> tuple[str, str | None]:
        text = memory.experience.strip()
        cap = self.s.writer.max_memory_chars
        if len(text) > cap:
            text = text[:cap] + "\n[...]"
        prompt = ADJUST_PROMPT.format(memory_intent=memory.intent.strip(), memory_text=text,
                                      intent=intent.strip(), trajectory=trajectory or "(no actions)")
        return self._ask(llm, prompt, PURPOSE_ADJUST, self.s.writer.adjust_max_tokens)

    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        with self._lock:
            used, keywords, kw_error = self._episodes.pop(task.task_id, ([], None, None))
        if self.skips(bool(result.errors)):
            return None  # plan ignores it: spend no model calls on it
        errors = [kw_error] if kw_error else []
        trajectory = format_trajectory(result, self.s.writer.max_trajectory_chars)
        add = self.s.update == "vanilla" or bool(result.success)
        out: dict[str, Any] = {"add": add, "experience": None, "script": "", "trajectory": "",
                               "keywords": None, "revisions": {}, "error": None}
        if add:
            if self.s.build in ("script", "proceduralization"):
                script, err = self.write_script(task.intent, result, trajectory, llm)
                out["script"] = script
                errors += [err] if err else []
            if self.s.build in ("trajectory", "proceduralization"):
                out["trajectory"] = trajectory or "(no actions)"
            if self.s.retrieve == "keyword_average":
                if keywords is None:
                    keywords, err = self.extract_keywords(task.intent, llm)
                    errors += [err] if err else []
                out["keywords"] = keywords
            if out["script"] or out["trajectory"]:  # a script that was never written stores nothing
                out["experience"], out["record"] = compose_entry(task.intent, bool(result.success),
                                                                 out["script"], out["trajectory"])
        if self.s.update == "adjustment" and not result.success and used:
            for mem in used[:self.s.adjust_limit]:
                revised, err = self.revise(mem, task.intent, trajectory, llm)
                if revised:
                    out["revisions"][mem.memory_id] = revised
                errors += [err] if err else []
        out["error"] = "; ".join(errors) or None
        return out

    # ------------------------------------------------------------------- plan
    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        update = BankUpdate()
        used = sorted({m.memory_id for it in items for m in it.injected})
        current = self.bank.get(used)
        hits = {mid: e.visits for mid, e in current.items()}
        wins = {mid: int(e.extra.get("successes", 0)) for mid, e in current.items()}
        touched: set[str] = set()
        revised: dict[str, str] = {}
        for it in items:
            if self.skips(it.errored):
                continue
            for m in it.injected:
                if m.memory_id not in current:
                    continue  # removed since retrieval
                hits[m.memory_id] += 1
                wins[m.memory_id] += int(bool(it.result.success))
                touched.add(m.memory_id)
            d = it.digest
            if d is None:
                continue
            if self.s.update == "adjustment" and not it.result.success:
                for mid, text in d.get("revisions", {}).items():
                    if mid in current:
                        revised[mid] = text  # a later failure of the batch wins
        update.add = self.new_entries(items)
        for mid in sorted(touched | set(revised)):
            if is_deprecated(hits[mid], wins[mid], self.s.deprecation):
                update.delete.append(mid)
                continue
            entry = current[mid]
            extra = dict(entry.extra, successes=wins[mid])
            fields: dict[str, Any] = {"visits": hits[mid]}
            if mid in revised:
                extra["script"] = revised[mid]
                extra["revisions"] = int(entry.extra.get("revisions", 0)) + 1
                fields["experience"], extra["record"] = compose_entry(entry.intent, entry.success, revised[mid],
                                                                      str(entry.extra.get("trajectory", "")))
            fields["extra"] = extra
            update.set_fields[mid] = fields
        return update

    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        d = it.digest
        if d is None or not (d.get("add") and d.get("experience")):
            return None
        extra: dict[str, Any] = {"successes": 0, "script": d["script"], "trajectory": d["trajectory"],
                                 "revisions": 0}
        if d.get("keywords") is not None:
            extra["keywords"] = list(d["keywords"])
        return NewMemory(d["experience"], kind=self.s.build, extra=extra, record=d.get("record"))

    def _entry_key(self, it: LearnItem) -> tuple[str, list[float]]:
        """keyword_average: the mean of the key words' embeddings (as queries are made);
        otherwise the intent's embedding."""
        if self.s.retrieve == "keyword_average":
            key = self.keyword_key(it.digest["keywords"] or [it.task.intent])
        else:
            key = np.asarray(super()._entry_key(it)[1], dtype=np.float32)
        return it.task.intent, [float(v) for v in key]

