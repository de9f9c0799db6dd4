"""Mem0 (`mem0ai` 2.2.1) driven by the project's LLM layer and embedder, for the Mem0 baseline
(memrl_baselines.mem0).

- LLM: a mem0 `LLMBase` subclass (`ProjectLLM`) registered in mem0's own `LlmFactory`
  (`register_provider`). Every call it gets goes through the project's `LLMClient` via an
  `EpisodeLLM`, so the response cache, retries, concurrency bound and token accounting
  apply, and the embedded offline model works. mem0's `LlmConfig` validator only knows its
  built-in provider names, so the provider entry is built with `model_construct`.
- Embeddings: a mem0 `EmbeddingBase` subclass (`ProjectEmbedding`) added to mem0's
  `EmbedderFactory` table; it embeds with the run's embedder (MiniLM, API, hashing...).
- Vector store: mem0's `chroma` provider, persistent, at `<run_dir>/mem0/chroma`; mem0's
  history database at `<run_dir>/mem0/history.db`.
- Telemetry: mem0 reads `MEM0_TELEMETRY` when it is imported; this module sets it to False
  before the import and also turns the flags off in the imported modules, so neither the
  PostHog client nor the remote notice fetch is ever created. `MEM0_DIR` (where mem0 writes
  its config.json) defaults to `<cache dir>/mem0` instead of `~/.mem0`. mem0 would download
  spaCy's `en_core_web_sm` on first use when spaCy is installed without it (ALFWorld pulls
  spaCy in); its spaCy features (entity boosts, BM25 lemmas) are switched off unless
  `spacy: true`, which requires the model to be installed already.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any

from memrl.core.cachedir import default_cache_dir

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

PROVIDER = "memrl"  # the name our LLM and embedder classes are registered under in mem0
# what the baseline takes from here: mem0's own classes (imported once, telemetry off) and ours
__all__ = ["BUDGET_KEY", "PROVIDER", "EmbedderConfig", "LlmConfig", "Memory", "Mem0LLMError", "MemoryConfig",
           "ProjectEmbedding", "ProjectLLM", "UnparsableOutput", "configure_spacy", "disable_telemetry",
           "first_extraction", "mem0", "parse_extraction"]

# ---------------------------------------------------------------------------- import
# mem0 reads MEM0_TELEMETRY (and MEM0_DIR, where it writes a config.json) when imported.
os.environ["MEM0_TELEMETRY"] = "False"
if not os.environ.get("MEM0_DIR"):
    os.environ["MEM0_DIR"] = str(default_cache_dir() / "mem0")

try:
    import mem0
    from mem0 import Memory
    from mem0.configs.base import MemoryConfig
    from mem0.configs.llms.base import BaseLlmConfig
    from mem0.embeddings.base import EmbeddingBase
    from mem0.embeddings.configs import EmbedderConfig
    from mem0.exceptions import LLMError as Mem0LLMError
    from mem0.llms.base import LLMBase
    from mem0.llms.configs import LlmConfig
    from mem0.memory import main as _mem0_main
    from mem0.memory import telemetry as _mem0_telemetry
    from mem0.memory.utils import extract_json, remove_code_blocks
    from mem0.utils import spacy_models as _mem0_spacy
    from mem0.utils.factory import EmbedderFactory, LlmFactory
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"memory=mem0 needs the `mem0` extra (pip install -e '.[mem0]'): {exc}") from exc


def disable_telemetry() -> None:
    """Telemetry off even if mem0 was imported before this module set the variable: the
    flags live in the imported modules; the PostHog client made at import is closed."""
    _mem0_telemetry.MEM0_TELEMETRY = False
    _mem0_main.MEM0_TELEMETRY = False
    if getattr(_mem0_telemetry.client_telemetry, "posthog", None) is not None:
        _mem0_telemetry.client_telemetry.close()


def configure_spacy(enabled: bool) -> None:
    """mem0 downloads spaCy's en_core_web_sm on first use when spaCy is installed without it
    (ALFWorld installs spaCy): never. Off = mem0's own "spaCy unavailable" path (no entity
    boosts, no BM25 lemmas); on = the model must already be installed."""
    if enabled:
        import spacy

        if not spacy.util.is_package("en_core_web_sm"):
            raise ValueError("memory.spacy: true needs spaCy's en_core_web_sm installed "
                             "(mem0 would otherwise try to download it)")
        _mem0_spacy._load_failed_full = _mem0_spacy._load_failed_lemma = False
    else:
        _mem0_spacy._load_failed_full = _mem0_spacy._load_failed_lemma = True


disable_telemetry()


# ------------------------------------------------------------------- mem0 adapters
BUDGET_KEY = "memory.llm_max_tokens"  # mem0's extraction answer budget


class _Binding:
    """What mem0's model calls go through: the `EpisodeLLM` of the add in progress."""

    def __init__(self, max_tokens: int, fixed_date: str | None, repair_json: bool) -> None:
        self.max_tokens = max_tokens
        self.fixed_date = fixed_date
        self.repair_json = repair_json
        self.current: "EpisodeLLM | None" = None
        self.repaired = False  # the answer of the add in progress needed `first_extraction`


class UnparsableOutput(ValueError):
    """The model's answer to mem0's extraction prompt is not the JSON mem0 asked for."""


def parse_extraction(text: str) -> list[dict[str, Any]]:
    """The memories in an answer to mem0's extraction prompt, read the way mem0 reads them
    (code fences stripped; else the outermost {...}); raises `UnparsableOutput`."""
    body = remove_code_blocks(text or "")
    if not body.strip():
        raise UnparsableOutput("empty answer")
    try:
        try:
            data = json.loads(body, strict=False)
        except json.JSONDecodeError:
            data = json.loads(extract_json(body), strict=False)
    except (json.JSONDecodeError, TypeError) as exc:
        raise UnparsableOutput(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("memory", []), list):
        raise UnparsableOutput("no 'memory' list")
    items = data.get("memory", [])
    if not all(isinstance(m, dict) and isinstance(m.get("text", ""), str) for m in items):
        raise UnparsableOutput("'memory' items must be objects with a 'text' string")
    return items


def first_extraction(text: str) -> str | None:
    """The first complete JSON object in `text` that mem0 could read as an extraction, or
    None. Small base models often write the object and then keep going; this recovers it."""
    decoder = json.JSONDecoder(strict=False)
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "memory" in obj:
            candidate = json.dumps(obj, ensure_ascii=False)
            try:
                parse_extraction(candidate)
                return candidate
            except UnparsableOutput:
                pass
        start = text.find("{", start + 1)
    return None


_DATE_LINE = re.compile(r"(## (?:Observation|Current) Date\n)\d{4}-\d{2}-\d{2}")


class ProjectLlmConfig(BaseLlmConfig):
    """mem0 LLM config carrying the binding to the project's client."""

    def __init__(self, binding: _Binding | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.binding = binding


class ProjectLLM(LLMBase):
    """mem0's model, answered by the project's LLM layer (cache, retries, accounting)."""

    def generate_response(self, messages, tools=None, tool_choice="auto", response_format=None, **kwargs):
        binding: _Binding | None = getattr(self.config, "binding", None)
        if binding is None or binding.current is None:
            raise RuntimeError("mem0 called its model outside Mem0Memory.apply()")
        if tools:
            raise NotImplementedError("tool calls are not used by this baseline")
        prompt = []
        for m in messages:
            content = m.get("content")
            if not isinstance(content, str):
                content = json.dumps(content, ensure_ascii=False, sort_keys=True)
            if binding.fixed_date:
                content = _DATE_LINE.sub(lambda mt: mt.group(1) + binding.fixed_date, content)
            prompt.append((str(m.get("role", "user")), content))
        wants_json = isinstance(response_format, dict) and response_format.get("type") == "json_object"
        text = binding.current.complete(prompt, purpose="mem0-add" if wants_json else "mem0",
                                        max_tokens=binding.max_tokens, budget_key=BUDGET_KEY)
        if wants_json:
            try:
                parse_extraction(text)
            except UnparsableOutput:
                fixed = first_extraction(text) if binding.repair_json else None
                if fixed is None:
                    raise  # mem0 re-raises it as its LLMError before it touches the store
                binding.repaired = True
                return fixed
        return text


class ProjectEmbedding(EmbeddingBase):
    """mem0's embedder, answered by the run's embedder (handed over as the config's `model`)."""

    def embed(self, text, memory_action=None):
        return [float(x) for x in self.config.model.embed([text])[0]]

    def embed_batch(self, texts, memory_action="add"):
        texts = list(texts)
        if not texts:
            return []
        return [[float(x) for x in row] for row in self.config.model.embed(texts)]


# mem0's own extension points: LlmFactory.register_provider; the embedder table has no
# register method, so the entry is added to it directly.
LlmFactory.register_provider(PROVIDER, f"{__name__}.ProjectLLM", ProjectLlmConfig)
EmbedderFactory.provider_to_class[PROVIDER] = f"{__name__}.ProjectEmbedding"
