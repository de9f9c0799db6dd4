"""A run as Inspect AI eval logs, written through Inspect's own API (`inspect_ai.log`), so
`inspect view` browses every episode of a run.

One log per training epoch (`<stem>_epoch<E>.eval`) and, for a transfer run, one per
held-out evaluation (`<stem>_eval<E>.eval`); one sample per episode:

- `input`: the task's intent; `messages`: the episode as a conversation: the task with the
  injected memories' texts as the agent was given them, then each step's action (assistant)
  and what the environment answered (user);
- `scores["success"]`: 1 or 0, with the outcome class (`answer`) and the env's own detail
  (`explanation`); the log's results: SR (`accuracy`) and CSR after that epoch;
- `metadata`: the injected memories with their text, Q, similarity and Phase-B score; the
  memory the episode wrote (id, text, Q as written); outcome, reward, steps, tokens, cost,
  errors, the model calls' cache keys, seed;
- `events`: one model event per model call with its prompt and answer, where the response
  cache (memrl.llm.response_cache) still holds them (`cache`: the response cache file; calls it lacks
  are left out and counted in the sample's metadata);
- an errored episode (model or environment error) carries the error as the sample's.

Memory texts come from the run's `memories.jsonl`; a run from before that file has none, and
its samples say so. inspect-ai is an optional extra (`pip install -e ".[inspect]"`).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from memrl.core.records import EpisodeRecord, read_episodes
from memrl.core.rundir import RunDir
from memrl.journal.banklog import BankHistory
from memrl.journal.memtexts import read_texts
from memrl.journal.runcard import identity
from memrl.metrics.compute import csr_curve, sr_curve, success_matrix

if TYPE_CHECKING:
    from memrl.llm.response_cache import ResponseCache

INSTALL_HINT = 'memrl export inspect needs inspect-ai: pip install -e ".[inspect]"'


def _inspect() -> Any:
    try:
        import inspect_ai.log as ilog
    except ImportError as exc:
        raise RuntimeError(INSTALL_HINT) from exc
    return ilog


def _iso(stamp: str | None) -> str:
    """A run card's time stamp (or now) as Inspect's ISO 8601 UTC string."""
    if stamp:
        for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z"):
            try:
                return datetime.strptime(stamp, fmt).astimezone(timezone.utc).isoformat()
            except ValueError:
                continue
    return datetime.now(timezone.utc).isoformat()


def _short(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()[:12]


def _memory_block(injected: list[dict[str, Any]], texts: dict[str, dict[str, str]]) -> str:
    if not injected:
        return ""
    lines = ["Memories injected into this episode:"]
    for i, m in enumerate(injected, 1):
        t = texts.get(str(m.get("text")))
        head = (f"--- memory {i}: {m.get('id')} (Q {float(m.get('q', 0)):+.3f}, "
                f"sim {float(m.get('sim', 0)):.3f}, score {float(m.get('score', 0)):+.3f})")
        lines.append(head)
        if t is None:
            lines.append("(text not recorded: the run predates memories.jsonl)")
        else:
            lines.append(f"earlier task: {t['intent']}")
            lines.append(t["experience"])
    return "\n".join(lines)


def _messages(rec: EpisodeRecord, texts: dict[str, dict[str, str]]) -> list[Any]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser

    opening = [f"Task: {rec.intent}"]
    first_obs = (rec.info or {}).get("initial_observation")
    if first_obs:
        opening.append(str(first_obs))
    block = _memory_block(rec.injected, texts)
    if block:
        opening.append(block)
    out: list[Any] = [ChatMessageUser(content="\n\n".join(opening))]
    for step in rec.transcript:
        out.append(ChatMessageAssistant(content=str(step.get("action", "")) or "(no action)"))
        out.append(ChatMessageUser(content=str(step.get("observation", "")) or "(no observation)"))
    return out


def _events(rec: EpisodeRecord, cache: "ResponseCache | None", model: str,
            created: str) -> tuple[list[Any], int]:
    """Model events for the record's calls found in the cache, and how many were missing."""
    if cache is None or not rec.model_calls:
        return [], len(rec.model_calls)
    from inspect_ai.event import ModelEvent
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser, GenerateConfig, ModelOutput

    roles = {"system": ChatMessageSystem, "assistant": ChatMessageAssistant}
    events, missing = [], 0
    for call in rec.model_calls:
        found = cache.lookup(str(call.get("key")))
        req, resp = found["request"], found["response"]
        if req is None:
            missing += 1
            continue
        msgs = []
        for role, content in req.get("messages", []):
            text = content if isinstance(content, str) else "\n".join(
                p.get("text", "[image]") for p in content if isinstance(p, dict))
            msgs.append(roles.get(role, ChatMessageUser)(content=text))
        output = (ModelOutput.from_content(model, resp["text"]) if resp is not None
                  else ModelOutput.from_content(model, "", stop_reason="unknown",
                                                error="the call failed"))
        events.append(ModelEvent(
            model=model, input=msgs, tools=[], tool_choice="none",
            config=GenerateConfig(max_tokens=req.get("max_tokens"), temperature=req.get("temperature"),
                                  top_p=req.get("top_p"), stop_seqs=list(req.get("stop") or []) or None),
            output=output, error=None if resp is not None else "the call failed",
            timestamp=created, metadata={"purpose": call.get("purpose"), "key": call.get("key")}))
    return events, missing


def _written(rec: EpisodeRecord, added: dict[str, dict[str, Any]],
             texts: dict[str, dict[str, str]]) -> dict[str, Any] | None:
    if not rec.written:
        return None
    row = added.get(rec.written, {})
    out: dict[str, Any] = {"id": rec.written}
    for k in ("q", "kind", "success"):
        if k in row:
            out[k] = row[k]
    t = texts.get(str(row.get("text")))
    if t is not None:
        out["experience"] = t["experience"]
    return out


def _sample(rec: EpisodeRecord, *, texts: dict[str, dict[str, str]],
            added: dict[str, dict[str, Any]], cache: "ResponseCache | None", model: str,
            created: str) -> Any:
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import Score

    injected = []
    for m in rec.injected:
        t = texts.get(str(m.get("text")))
        injected.append({"id": m.get("id"), "q": m.get("q"), "similarity": m.get("sim"),
                         "score": m.get("score"),
                         "intent": t["intent"] if t else None,
                         "experience": t["experience"] if t else None})
    events, missing = _events(rec, cache, model, created)
    tokens = rec.tokens or {}
    usage = ModelUsage(input_tokens=int(tokens.get("prompt", 0)),
                       output_tokens=int(tokens.get("completion", 0)),
                       total_tokens=int(tokens.get("prompt", 0)) + int(tokens.get("completion", 0)),
                       total_cost=float(rec.cost_usd or 0.0))
    meta = {"task_id": rec.task_id, "epoch": rec.epoch, "batch": rec.batch, "outcome": rec.outcome,
            "outcome_detail": rec.outcome_detail, "reward": rec.reward, "steps": rec.steps,
            "injected": injected, "written": _written(rec, added, texts),
            "tokens": dict(tokens), "cost_usd": rec.cost_usd, "llm_calls": rec.llm_calls,
            "errors": list(rec.errors), "seed": rec.seed, "duration_s": rec.duration_s,
            "model_calls": list(rec.model_calls), "model_calls_not_in_cache": missing,
            "info": rec.info}
    error = None
    if rec.outcome in ("llm_error", "env_error", "judge_error") and rec.errors:
        error = EvalError(message="; ".join(rec.errors)[:2000], traceback="", traceback_ansi="")
    last = rec.transcript[-1]["action"] if rec.transcript else ""
    return EvalSample(
        id=rec.task_id, epoch=int(rec.epoch), input=rec.intent, target="",
        messages=_messages(rec, texts), output=ModelOutput.from_content(model, str(last)),
        scores={"success": Score(value=1.0 if rec.success else 0.0, answer=rec.outcome,
                                 explanation=rec.outcome_detail or rec.outcome)},
        metadata=meta, events=events, model_usage={model: usage} if model else {},
        total_time=float(rec.duration_s or 0.0), working_time=float(rec.duration_s or 0.0),
        error=error)


def run_stem(rd: RunDir, ident: dict[str, str]) -> str:
    name = f"{ident['env']}_{ident['method']}_seed{ident['seed']}_{_short(str(rd.root.resolve()))}"
    return "".join(c if c.isalnum() or c in "._=-" else "_" for c in name)


def _log(ilog: Any, *, rd: RunDir, card: dict[str, Any], ident: dict[str, str], phase: str,
         epoch: int, records: list[EpisodeRecord], sr: float, csr: float | None,
         texts: dict[str, dict[str, str]], added: dict[str, dict[str, Any]],
         cache: "ResponseCache | None") -> Any:
    from inspect_ai.model import ModelUsage

    created = _iso(card.get("created"))
    sessions = [x for x in card.get("sessions") or [] if x.get("started")]
    model = ident["model"]
    config = card.get("config") or {}
    git = card.get("git") or {}
    task = f"{ident['env']}/{ident['method']}" + ("" if phase == "train" else " (transfer eval)")
    samples = [_sample(r, texts=texts, added=added, cache=cache, model=model, created=created)
               for r in sorted(records, key=lambda r: (r.batch, r.task_id))]
    usage = ModelUsage()
    for s in samples:
        for u in s.model_usage.values():
            usage = usage + u
    metrics = {"accuracy": ilog.EvalMetric(name="accuracy", value=sr)}
    if csr is not None:
        metrics["csr"] = ilog.EvalMetric(name="csr", value=csr)
    spec = ilog.EvalSpec(
        eval_id=_short(f"{rd.root.resolve()}/{phase}/{epoch}"), run_id=_short(str(rd.root.resolve())),
        # one task id per log: Inspect takes logs of one task id for retries of each other
        created=created, task=task, task_id=_short(f"{rd.root.resolve()}/{phase}/{epoch}"),
        task_display_name=f"{task} · epoch {epoch}",
        dataset=ilog.EvalDataset(name=ident["env"], samples=len(samples),
                                 sample_ids=[s.id for s in samples]),
        model=model, config=ilog.EvalConfig(),
        revision=ilog.EvalRevision(type="git", origin="", commit=str(git.get("commit") or ""),
                                   dirty=git.get("dirty")) if git.get("commit") else None,
        packages={k: v for k, v in (card.get("versions") or {}).items() if v},
        tags=[ident["env"], ident["method"], f"seed {ident['seed']}", phase, f"epoch {epoch}"],
        metadata={"memrl_run": str(rd.root), "phase": phase, "epoch": epoch, "identity": ident,
                  "memory": config.get("memory"), "runner": config.get("runner"),
                  "n_tasks": card.get("n_tasks")})
    return ilog.EvalLog(
        status="success", eval=spec,
        plan=ilog.EvalPlan(steps=[ilog.EvalPlanStep(solver=f"memrl:{ident['method']}",
                                                    params={"agent": (config.get("agent") or {}).get("name")})]),
        results=ilog.EvalResults(total_samples=len(samples), completed_samples=len(samples),
                                 scores=[ilog.EvalScore(name="success", scorer="success",
                                                        metrics=metrics)]),
        stats=ilog.EvalStats(started_at=_iso(sessions[0].get("started")) if sessions else created,
                             completed_at=_iso(sessions[-1].get("ended")) if sessions else created,
                             model_usage={model: usage} if model else {}),
        samples=samples)


def export_run(run_dir: str | Path | RunDir, out: str | Path, *,
               cache: "ResponseCache | None" = None) -> list[Path]:
    """Write the run's Inspect logs into `out`; returns their paths."""
    ilog = _inspect()
    rd = RunDir(run_dir)
    card = json.loads(rd.card.read_text(encoding="utf-8"))
    ident = identity(card.get("config") or {}, card.get("model"))
    texts = read_texts(rd.memories)
    hist = BankHistory.read(rd)
    added = {str(a["id"]): a for line in hist.lines for a in line.get("added") or []}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = run_stem(rd, ident)
    written: list[Path] = []
    phases: list[tuple[str, Sequence[EpisodeRecord]]] = [("train", read_episodes(rd.episodes))]
    if rd.eval_episodes.is_file():
        phases.append(("eval", read_episodes(rd.eval_episodes)))
    for phase, records in phases:
        if not records:
            continue
        _, epochs, S = success_matrix(list(records), allow_missing=True)
        sr, csr = sr_curve(S), csr_curve(S)
        for i, e in enumerate(epochs):
            recs = [r for r in records if int(r.epoch) == e]
            if not recs:
                continue
            log = _log(ilog, rd=rd, card=card, ident=ident, phase=phase, epoch=e, records=recs,
                       sr=sr[i], csr=csr[i] if phase == "train" else None, texts=texts,
                       added=added, cache=cache)
            path = out / f"{stem}_{'epoch' if phase == 'train' else 'eval'}{e:02d}.eval"
            ilog.write_eval_log(log, str(path))
            written.append(path)
    return written
