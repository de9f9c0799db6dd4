"""The embedded backend without loading a model: which file, which id, which prefix is kept."""

from __future__ import annotations

import hashlib

import pytest

from memrl.config.sections import LLMSettings
from memrl.core.errors import ConfigError
from memrl.llm import local_models
from memrl.control.wiring import build_backend
from memrl.llm.local import LocalLlamaBackend, reusable_prefix


def test_reusable_prefix_keeps_whole_blocks_of_the_common_prefix():
    trusted = list(range(100))
    assert reusable_prefix(trusted, list(range(150)), 32) == 96  # 100 common -> 3 whole blocks
    assert reusable_prefix(trusted, list(range(50)) + [-1] * 80, 32) == 32  # differs at 50
    assert reusable_prefix(trusted, list(range(31)) + [-1] * 10, 32) == 0  # no whole block
    assert reusable_prefix([], list(range(150)), 32) == 0
    assert reusable_prefix(trusted, list(range(150)), 0) == 0  # block 0 = no reuse


def test_reusable_prefix_always_leaves_the_last_token_to_evaluate():
    # the new prompt is exactly the cached one: its last token must still be evaluated (its
    # logits are what the answer is sampled from), so the last whole block is not kept
    trusted = list(range(64))
    assert reusable_prefix(trusted, list(range(64)), 32) == 32
    assert reusable_prefix(trusted, list(range(65)), 32) == 64


def test_model_id_of_any_file_is_its_name_and_hash(tmp_path):
    a = tmp_path / "my-model.Q4.gguf"
    a.write_bytes(b"not really a model")
    digest = hashlib.sha256(b"not really a model").hexdigest()
    assert local_models.model_id_for(a) == f"local/my-model.Q4@{digest[:12]}"
    b = tmp_path / "renamed.gguf"
    b.write_bytes(b"another file")
    assert local_models.model_id_for(b) != local_models.model_id_for(a)
    backend = LocalLlamaBackend(model_path=a)
    assert backend.model_id == f"local/my-model.Q4@{digest[:12]}"
    chat = LocalLlamaBackend(model_path=a, mode="chat")
    assert chat.model_id == backend.model_id + "/chat"
    with pytest.raises(FileNotFoundError, match="llm.model_path: no model file"):
        LocalLlamaBackend(model_path=tmp_path / "missing.gguf").model_id


def test_a_copy_of_a_packaged_file_keeps_the_packaged_id(tmp_path, monkeypatch):
    fake = tmp_path / "copy.gguf"
    fake.write_bytes(b"pretend this is SmolLM2")
    monkeypatch.setattr(local_models, "SMOLLM2_SHA256", hashlib.sha256(b"pretend this is SmolLM2").hexdigest())
    assert local_models.model_id_for(fake) == "local/smollm2-135m-instruct-q4_1"


def test_packaged_models_have_stable_ids_without_loading():
    # the default id is the one the project always used, so its cache entries keep hitting
    assert LocalLlamaBackend().model_id == "local/gemma3-270m-q4_k_m"
    assert LocalLlamaBackend(model="smollm2-135m-instruct-q4_1", mode="chat").model_id == \
        "local/smollm2-135m-instruct-q4_1/chat"


def test_bad_local_choices_are_refused():
    with pytest.raises(ValueError, match="unknown embedded model"):
        LocalLlamaBackend(model="gpt-5")
    with pytest.raises(ValueError, match="base model without a chat template"):
        LocalLlamaBackend(model="gemma3-270m-q4_k_m", mode="chat")
    with pytest.raises(ValueError, match="model: unknown embedded model"):
        LLMSettings(name="x", backend="local", model="nope")
    with pytest.raises(ValueError, match="extra: settings passed to litellm"):
        LLMSettings(name="x", backend="local", extra={"repeat_penalty": 1.0})
    with pytest.raises(ValueError, match="mode"):
        LLMSettings(name="x", backend="litellm", model="openai/x", mode="chat")
    assert issubclass(ConfigError, ValueError)


def test_factory_passes_local_settings_and_litellm_extra():
    local = build_backend(LLMSettings(name="x", backend="local", model="smollm2-135m-instruct-q4_1", mode="chat",
                                      reuse_prefix=False, prefix_block=16))
    assert (local.mode, local.reuse_prefix, local.block) == ("chat", False, 16)
    lite = build_backend(LLMSettings(name="x", backend="litellm", model="text-completion-openai/gemma",
                                     api_base="http://127.0.0.1:9/v1", extra={"repeat_penalty": 1.0}))
    assert lite.extra == {"repeat_penalty": 1.0}
    # the settings that change answers are part of the model's identity, hence of every cache
    # key (the name stays the name), whether the identity is the name or a server's fingerprint
    for where in ({}, {"api_base": "http://127.0.0.1:9/v1", "model_fingerprint": "f1"}):
        cfg = {"name": "x", "backend": "litellm", "model": "text-completion-openai/gemma", **where}
        plain = build_backend(LLMSettings.model_validate(cfg))
        tuned = build_backend(LLMSettings.model_validate({**cfg, "extra": {"repeat_penalty": 1.0}}))
        assert tuned.model_id == plain.model_id == "text-completion-openai/gemma"
        assert tuned.cache_identity == plain.cache_identity + '|extra={"repeat_penalty":1.0}'
        assert tuned.identity()["key"] == tuned.cache_identity
        assert tuned.identity()["extra"] == {"repeat_penalty": 1.0}


def test_the_local_model_identity_is_its_file_and_a_resume_with_another_is_refused(tmp_path):
    """One home for what the embedded model is: the id derived from the file is the cache
    identity and what the run card's resume check compares (as a served model's fingerprint)."""
    from memrl.control.preflight import identity
    from memrl.core.stops import RunRefused
    from memrl.journal.runcard import RunCard
    from clients import make_client
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"model a")
    b.write_bytes(b"model b")
    ident = identity(make_client(LocalLlamaBackend(model_path=a)))
    assert ident["key"] == ident["model"] == LocalLlamaBackend(model_path=a).model_id
    assert ident["source"] == "model file (name and sha256)" and ident["file"] == str(a)
    assert make_client(LocalLlamaBackend(model_path=a)).cache_identity == ident["key"]
    packaged_ident = LocalLlamaBackend(model="smollm2-135m-instruct-q4_1", mode="chat")
    assert packaged_ident.model_id == "local/smollm2-135m-instruct-q4_1/chat"

    card = RunCard(tmp_path / "run", {})
    card.check_models({"llm": ident})  # the first session records it
    card.check_models({"llm": identity(make_client(LocalLlamaBackend(model_path=a)))})  # same file: fine
    with pytest.raises(RunRefused, match="another model"):
        card.check_models({"llm": identity(make_client(LocalLlamaBackend(model_path=b)))})


def test_speed_rates_of_the_counters():
    from memrl.llm.local import SPEED_COUNTERS, speed_rates

    counts = {**SPEED_COUNTERS, "prompt_tokens": 1000, "prompt_tokens_evaluated": 100, "prompt_eval_s": 0.5,
              "decode_tokens": 30, "decode_s": 0.6}
    assert speed_rates(counts) == {"prompt_tokens_per_s": 200.0, "effective_prompt_tokens_per_s": 2000.0,
                                   "decode_tokens_per_s": pytest.approx(50.0), "reused_share": 0.9}
    assert set(speed_rates(dict(SPEED_COUNTERS)).values()) == {None}  # nothing timed, no rate
