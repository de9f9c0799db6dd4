"""What the emulated providers refuse, each with the provider's HTTP status, error type and
message shape (memrl.testing.provider answers with these; docs/hosted-models.md lists them):

  key      OpenAI: no key 401 (code null), a wrong key 401 `invalid_api_key`. Gemini: no key
           403 PERMISSION_DENIED, a wrong key 400 INVALID_ARGUMENT (reason API_KEY_INVALID).
  model    a name the route does not serve: OpenAI 404 `model_not_found`, Gemini 404 NOT_FOUND.
  params   OpenAI reasoning models: max_tokens, temperature other than 1, and the parameters
           in the model's `refused` list (top_p, penalties, logprobs, top_logprobs,
           logit_bias; gpt-5-mini also stop); chat models: reasoning_effort. Both: a budget
           outside 1..max output, JSON mode without the word "json". Gemini: maxOutputTokens
           outside its range, an unknown thinking level, level and budget together, budget 0,
           responseLogprobs.
  context  a prompt past the model's input limit, or prompt + budget past its context window:
           OpenAI 400 `context_length_exceeded` ("This model's maximum context length is
           ..."), Gemini 400 INVALID_ARGUMENT ("The input token count (n) exceeds the maximum
           number of tokens allowed (m).").
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from memrl.testing.catalogue import ModelSpec

GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
                 504: "DEADLINE_EXCEEDED"}
GOOGLE_NO_KEY = ("Method doesn't allow unregistered callers (callers without established identity). "
                 "Please use API Key or other form of API consumer identity to call this API.")
GOOGLE_BAD_KEY = "API key not valid. Please pass a valid API key."
OPENAI_NO_KEY = ("You didn't provide an API key. You need to provide your API key in an Authorization header "
                 "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
OPENAI_KEYS_PAGE = "https://platform.openai.com/account/api-keys"


# ------------------------------------------------------------------------------ error bodies
def openai_error(message: str, param: str | None, code: str | None,
                 type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def google_error(status: int, message: str, reason: str | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": status, "message": message, "status": GOOGLE_STATUS.get(status, "UNKNOWN")}
    if reason is not None:
        err["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                           "domain": "googleapis.com",
                           "metadata": {"service": "generativelanguage.googleapis.com"}}]
    return {"error": err}


def key_refusal(google: bool, sent: str | None) -> tuple[int, dict[str, Any]]:
    """(status, body) for a request without the provider's key: `sent` is the key it carried
    (None: none)."""
    if google:
        return (400, google_error(400, GOOGLE_BAD_KEY, "API_KEY_INVALID")) if sent else \
            (403, google_error(403, GOOGLE_NO_KEY))
    if not sent:
        return 401, openai_error(OPENAI_NO_KEY, None, None)
    shown = f"{sent[:3]}{'*' * max(0, len(sent) - 7)}{sent[-4:]}" if len(sent) > 8 else "*" * len(sent)
    return 401, openai_error(f"Incorrect API key provided: {shown}. You can find your API key at "
                             f"{OPENAI_KEYS_PAGE}.", None, "invalid_api_key")


def not_found(route: str, model: str) -> dict[str, Any]:
    """The 404 body for a model the route does not serve."""
    if route == "gemini":
        return google_error(404, f"models/{model} is not found for API version v1beta, or is not "
                                 "supported for generateContent.")
    return openai_error(f"The model `{model}` does not exist or you do not have access to it.", None,
                        "model_not_found")


# ------------------------------------------------------------------------------ OpenAI
def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, (int, float)) and float(v).is_integer() else str(v)


def _given(body: Mapping[str, Any], key: str) -> bool:
    return body.get(key) is not None


def _unsupported(param: str, extra: str = "") -> dict[str, Any]:
    return openai_error(f"Unsupported parameter: '{param}' is not supported with this model.{extra}",
                        param, "unsupported_parameter")


def openai_context(spec: ModelSpec, n_prompt: int, budget: int | None) -> dict[str, Any] | None:
    """OpenAI's 400 body for a prompt past the input limit, or a prompt + budget past the
    context window; None when it fits."""
    window = spec.context_window or spec.max_input_tokens
    if spec.max_input_tokens is not None and n_prompt > spec.max_input_tokens:
        return openai_error(f"This model's maximum context length is {window} tokens. However, your messages "
                            f"resulted in {n_prompt} tokens. Please reduce the length of the messages.",
                            "messages", "context_length_exceeded")
    if spec.context_window is not None and budget is not None and n_prompt + budget > spec.context_window:
        return openai_error(f"This model's maximum context length is {spec.context_window} tokens. However, you "
                            f"requested {n_prompt + budget} tokens ({n_prompt} in the messages, {budget} in the "
                            "completion). Please reduce the length of the messages or completion.",
                            "messages", "context_length_exceeded")
    return None


def openai_refusal(spec: ModelSpec, body: Mapping[str, Any], prompt_text: str, n_prompt: int) -> dict[str, Any] | None:
    """OpenAI's 400 body for a request this model refuses, or None (`prompt_text`: the prompt
    as the emulation reads it, for JSON mode's rule; `n_prompt`: its tokens)."""
    budget_key = "max_completion_tokens" if _given(body, "max_completion_tokens") else "max_tokens"
    if spec.kind == "openai_reasoning":
        if _given(body, "max_tokens"):
            return _unsupported("max_tokens", " Use 'max_completion_tokens' instead.")
        t = body.get("temperature")
        if t is not None and t != 1:
            if spec.temperature_refusal == "parameter":
                return _unsupported("temperature")
            return openai_error(f"Unsupported value: 'temperature' does not support {_num(t)} with this "
                                "model. Only the default (1) value is supported.", "temperature",
                                "unsupported_value")
        for param in spec.refused:
            if _given(body, param):
                return _unsupported(param)
        effort = body.get("reasoning_effort")
        if effort is not None and effort not in spec.efforts:
            listed = ", ".join(f"'{e}'" for e in spec.efforts[:-1]) + f", and '{spec.efforts[-1]}'"
            return openai_error(f"Unsupported value: 'reasoning_effort' does not support {effort!r} with "
                                f"this model. Supported values are: {listed}.", "reasoning_effort",
                                "unsupported_value")
    elif _given(body, "reasoning_effort"):
        return _unsupported("reasoning_effort")
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_object" and "json" not in prompt_text.lower():
        return openai_error("'messages' must contain the word 'json' in some form, to use 'response_format' "
                            "of type 'json_object'.", "messages", None)
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 128):
        return openai_error(f"Invalid 'n': expected an integer from 1 to 128, but got {n!r} instead.", "n",
                            "invalid_value")
    budget = body.get(budget_key)
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            return openai_error(f"Invalid '{budget_key}': integer below minimum value. Expected a value "
                                f">= 1, but got {budget!r} instead.", budget_key, "integer_below_min_value")
        limit = spec.max_output_tokens or budget
        if budget > limit:
            return openai_error(f"{budget_key} is too large: {budget}. This model supports at most {limit} "
                                f"completion tokens, whereas you provided {budget}.", budget_key, "invalid_value")
    return openai_context(spec, n_prompt, budget)


# ------------------------------------------------------------------------------ Gemini
def cfg(config: Mapping[str, Any], camel: str) -> Any:
    """A generationConfig field under its camelCase or snake_case name (the API takes both)."""
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
    return config.get(camel, config.get(snake))


def gemini_refusal(spec: ModelSpec, config: Mapping[str, Any], n_prompt: int) -> str | None:
    """The message of Gemini's 400 INVALID_ARGUMENT for a request this model refuses, or None."""
    if spec.max_input_tokens is not None and n_prompt > spec.max_input_tokens:
        return (f"The input token count ({n_prompt}) exceeds the maximum number of tokens allowed "
                f"({spec.max_input_tokens}).")
    budget = cfg(config, "maxOutputTokens")
    limit = spec.max_output_tokens or 0
    if budget is not None and (not isinstance(budget, int) or not 1 <= budget <= limit):
        return (f"Unable to submit request because it has a maxOutputTokens value of {budget} but the "
                f"supported range is from 1 (inclusive) to {limit + 1} (exclusive). Update the value "
                "and try again.")
    count = cfg(config, "candidateCount")
    if count is not None and (not isinstance(count, int) or not 1 <= count <= 8):
        return f"Unable to submit request because candidateCount {count} is out of range [1, 8]."
    if cfg(config, "responseLogprobs") and not spec.logprobs:
        return f"Logprobs is not enabled for models/{spec.name}"
    thinking = cfg(config, "thinkingConfig") or {}
    level, tbudget = cfg(thinking, "thinkingLevel"), cfg(thinking, "thinkingBudget")
    if level is not None and str(level).lower() not in spec.efforts:
        return f"Thinking level {level} is not supported for this model. Supported levels: " \
               + ", ".join(spec.efforts) + "."
    if level is not None and tbudget is not None:
        return "You can only set only one of thinking budget and thinking level."
    if tbudget == 0:
        return "Budget 0 is invalid. This model only works in thinking mode."
    return None
