"""A fake OpenAI-compatible chat server on 127.0.0.1 that injects provider faults.

It is driven through litellm exactly like a real provider
(`llm=openai_compatible llm.model=openai/fault llm.api_base=<server.api_base>`), so a run
against it exercises the real client stack: HTTP, litellm's error mapping, the client's
retries and backoff, and how the env and the runner record what still fails.

Every request gets, after a fixed latency, either a normal reply or one fault:

  rate_limit_retry_after  HTTP 429 with `Retry-After: <retry_after_s>`
  rate_limit              HTTP 429 without Retry-After
  server_error            HTTP 500
  unavailable             HTTP 503
  hang                    no answer for `hang_s` (past the client's timeout), then HTTP 504
  truncated_json          HTTP 200 whose JSON body is cut in half
  empty_content           HTTP 200, a well-formed reply with empty content
  no_action               HTTP 200, a reply with no parseable action ("  >  ")

and the faults no retry cures (`FATAL_FAULTS`, never part of `FaultPlan.mixed`):

  auth_error              HTTP 401 invalid_api_key
  permission_denied       HTTP 403
  model_not_found         HTTP 404 model_not_found
  bad_request             HTTP 400 invalid_request_error
  context_window          HTTP 400 context_length_exceeded ("maximum context length ...")

A provider's rate limit (`limit_requests=N`, `limit_window_s=W`): at most N requests are
answered per sliding window of W seconds; any beyond it gets HTTP 429 with a Retry-After
(and retry-after-ms) saying when the oldest answered request leaves the window. Rejected
requests do not count towards the window. `counts()["over_limit"]` is how many were
rejected, so a test can see whether a client turns a rate limit into a storm of retries.

A server made with `api_key=...` refuses any request without that key, as a real provider
does (under the emulation in the provider's own status and shape: memrl.testing.provider_rules;
the emulation checks keys always: without `api_key` it takes EMULATED_KEYS); `models=[...]`
is what it lists at GET /v1/models (default: one model, id "fault"), so a test can serve
"another model under the same name".

The choice is a pure function of (seed, request content, how many times this content was seen
before), so a run that sends the same requests meets the same faults, whatever the thread
interleaving; a retry of a faulted request is a new draw (`cure_after=n`: its n-th and later
tries are never faulted). `sticky` rules fault every request whose last message contains all
of a rule's substrings (a call that fails after any number of retries); `routes` limits the
draw to some routes (chat, gemini, embeddings). `counts()` (or
GET /stats) says what was injected; POST /reset zeroes it.

Normal replies (memrl.testing.replies, re-exported here) suit each benchmark's parsers: ALFWorld
actions derived from the prompt (a tour of the room's receptacles), writer plans/reflections,
code, shell, SQL, HLE answers and verdicts. Expert reply mode (`expert=`, `--expert FILE`):
an ALFWorld game with a recorded expert trajectory gets the expert's next action instead.

Hosted-provider emulation (`provider=True` or a `ProviderPlan`, `--provider`; module
memrl.testing.provider): requests for catalogued models (OpenAI's at /v1/chat/completions and
/v1/embeddings, Gemini's at `gemini_base` + /models/<model>:generateContent) are validated,
answered and billed as the provider would (`counts()["billed"]`); other model names are
refused on every route (404, as the provider does). Faults are injected on top (in Google's
error format on the Gemini route): an injected 429/5xx is never billed; an injected 200 is,
and so are a `truncated_json` reply and a `hang` (the provider made the reply; the client
never reads it), which the ledger counts as unseen (memrl.testing.ledger).

CLI (for benchmarks that keep the server out of the client's process):
    python -m memrl.testing.fault_server --port 8765 --latency 0.5 --fault-rate 0.2 [--provider]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import threading
import time
from collections import Counter
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence
from urllib.parse import parse_qs, urlsplit

from memrl.testing.fault_plan import (FATAL_FAULTS, FAULT_ERRORS, FAULTS, NO_ACTION_REPLY, ROUTES, TRANSIENT_FAULTS,
                                      FaultPlan, content_key)
from memrl.testing.provider import (EMULATED_KEYS, Provider, ProviderPlan, google_error, key_refusal, not_found,
                                    provider_route)
from memrl.testing.replies import apply_stop, reply_for, request_messages, text_of

# the names tests and scripts import from here (their home: memrl.testing.fault_plan)
__all__ = ["FATAL_FAULTS", "FAULTS", "NO_ACTION_REPLY", "ROUTES", "TRANSIENT_FAULTS", "FaultPlan", "FaultServer",
           "content_key"]

# ------------------------------------------------------------------------------ server
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients pool their connections
    # Headers and body go out in two writes: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK (~40 ms per reply on Linux), which would be measured as latency.
    disable_nagle_algorithm = True
    server: "_HTTPServer"

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        return None

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def do_GET(self) -> None:  # the stdlib's name
        path = urlsplit(self.path).path.rstrip("/")
        owner = self.server.owner
        if path == "/stats":
            self._json(200, owner.counts())
        elif path in ("/v1/models", "/models"):
            if not owner.authorized(self):
                self._json(*key_refusal(False, owner.sent_key(self)))
                return
            self._json(200, {"object": "list", "data": owner.models})
        elif path == "/v1beta/models" and owner.provider is not None:
            if not owner.authorized(self, google=True):
                self._json(*key_refusal(True, owner.sent_key(self, google=True)))
                return
            self._json(200, owner.provider.listing(google=True))
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # the stdlib's name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = urlsplit(self.path).path.rstrip("/")
        owner = self.server.owner
        if path == "/reset":
            owner.reset()
            self._json(200, {"ok": True})
            return
        extra = provider_route(path) if owner.provider is not None else None
        route, path_model = ("chat", None) if path.endswith("/chat/completions") else extra or (None, None)
        if route is None:
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        google = route == "gemini"
        try:
            body = json.loads(raw or b"{}")
            model = path_model or str(body.get("model") or "")
            messages = request_messages(route, body)
        except (ValueError, TypeError, AttributeError):
            self._json(400, google_error(400, "Invalid JSON payload received.") if google else
                       {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
            return
        try:
            owner.answer(self, body, messages, route=route, model=model)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. after a hang)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many clients connecting at once must not be refused
    owner: "FaultServer"


class FaultServer:
    """The server, run in a background thread. Use as a context manager or start()/stop().
    `provider`: True or a `ProviderPlan` turns on the hosted-provider emulation (module doc).
    `api_key`: the key every request must carry, one for all routes or {"openai": ..., "google":
    ...}; None: no key is checked, except under the emulation, which then takes EMULATED_KEYS."""

    def __init__(self, plan: FaultPlan | None = None, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | dict[str, str] | None = None, models: list[dict[str, Any]] | None = None,
                 expert: dict[str, list[str]] | None = None, provider: bool | ProviderPlan | None = None):
        self.plan = plan or FaultPlan()
        self.expert = {k.strip(): list(v) for k, v in (expert or {}).items()}  # expert reply mode
        if api_key is None and provider:
            api_key = dict(EMULATED_KEYS)
        self.keys: dict[str, str] | None = None if api_key is None else \
            dict(api_key) if isinstance(api_key, dict) else {"openai": api_key, "google": api_key}
        settings = provider if isinstance(provider, ProviderPlan) else ProviderPlan() if provider else None
        self.provider = Provider(settings, self._reply) if settings is not None else None
        default = Provider.listing()["data"] if self.provider else [{"id": "fault", "object": "model"}]
        self.models = list(models) if models is not None else default
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._seen: Counter[str] = Counter()
        self._counts: Counter[str] = Counter()
        self._latency_total = 0.0
        self._in_flight = 0
        self._max_in_flight = 0
        self._admitted: list[float] = []  # answer times inside the rate-limit window

    # -- lifecycle ----------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def gemini_base(self) -> str:
        """The `api_base` for litellm's `gemini/<model>` (Google AI Studio's v1beta API)."""
        return f"http://127.0.0.1:{self.port}/v1beta"

    def start(self) -> "FaultServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes hanging requests
        if self._thread is not None:  # shutdown() waits for serve_forever: only if it runs
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> "FaultServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- accounting -----------------------------------------------------------------
    def counts(self) -> dict[str, Any]:
        """requests, ok, one count per injected fault (zeros included), `faults` (their sum),
        the total injected latency and the most requests in flight at once; with the provider
        emulation, `billed` (its ledger: provider.Ledger.snapshot)."""
        with self._lock:
            out: dict[str, Any] = {"requests": self._counts["requests"], "ok": self._counts["ok"]}
            for name in FAULTS:
                out[name] = self._counts[name]
            out["faults"] = sum(self._counts[n] for n in FAULTS)
            out["over_limit"] = self._counts["over_limit"]
            out["latency_total_s"] = round(self._latency_total, 6)
            out["max_in_flight"] = self._max_in_flight
        if self.provider is not None:
            out["billed"] = self.provider.counts()
        return out

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()
            self._counts.clear()
            self._latency_total = 0.0
            self._max_in_flight = 0
            self._admitted.clear()
        if self.provider is not None:
            self.provider.reset()

    def over_limit(self) -> float | None:
        """None if a request may be answered now (and counts it in the window), else the
        seconds until the window has room."""
        limit = self.plan.limit_requests
        if limit is None:
            return None
        now = time.monotonic()
        with self._lock:
            horizon = now - self.plan.limit_window_s
            self._admitted = [t for t in self._admitted if t > horizon]
            if len(self._admitted) < limit:
                self._admitted.append(now)
                return None
            self._counts["over_limit"] += 1
            self._counts["requests"] += 1
            return self._admitted[0] + self.plan.limit_window_s - now

    @staticmethod
    def sent_key(handler: _Handler, google: bool = False) -> str | None:
        """The key a request carries: a bearer token (OpenAI), or Google's `x-goog-api-key`
        header or `key=` query parameter; None when it carries none."""
        if google:
            return handler.headers.get("x-goog-api-key") or _query_key(handler)
        auth = handler.headers.get("Authorization") or ""
        return auth[len("Bearer "):] if auth.startswith("Bearer ") and len(auth) > len("Bearer ") else None

    def authorized(self, handler: _Handler, google: bool = False) -> bool:
        """The request carries the server's key for its route (always, when none is set)."""
        if self.keys is None:
            return True
        return self.sent_key(handler, google) == self.keys["google" if google else "openai"]

    # -- one request ------------------------------------------------------------------
    def answer(self, handler: _Handler, body: dict[str, Any], messages: list[dict[str, Any]],
               route: str = "chat", model: str | None = None) -> None:
        model = str(body.get("model") or "") if model is None else model
        spec = self.provider.spec(model, route) if self.provider is not None else None
        google = route == "gemini"
        wait = self.over_limit()
        if wait is not None:
            message = "rate limit reached: too many requests in the window (injected)"
            self._unbilled(spec, 429)
            handler._json(429, google_error(429, message) if google else _error(message, "rate_limit_exceeded"),
                          {"Retry-After": str(max(1, math.ceil(wait))),
                           "retry-after-ms": str(max(1, math.ceil(wait * 1000)))})
            return
        key = content_key({**body, "model": model} if google else body, emulated=spec is not None)
        last = text_of(messages[-1].get("content")) if messages else ""
        with self._lock:
            attempt = self._seen[key]
            self._seen[key] += 1
            self._counts["requests"] += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        fault = self.plan.choose(key, attempt, last, route)
        if not self.authorized(handler, google):
            fault = "auth_error"  # a provider checks the key first: then the model, then the rest
        try:
            if self.plan.latency_s:
                self._stopping.wait(self.plan.latency_s)
            with self._lock:
                self._latency_total += self.plan.latency_s
                self._counts[fault or "ok"] += 1
            self._respond(handler, fault, body, messages, route, model)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _unbilled(self, spec: Any, status: int) -> None:
        if spec is not None and self.provider is not None:
            self.provider.ledger.unbilled(spec.name, status)

    def _respond(self, h: _Handler, fault: str | None, body: dict[str, Any], messages: list[dict[str, Any]],
                 route: str = "chat", model: str = "") -> None:
        spec = self.provider.spec(model, route) if self.provider is not None else None
        google = route == "gemini"
        if fault == "auth_error" and self.provider is not None:  # the provider's own refusal
            status, obj = key_refusal(google, self.sent_key(h, google))
            self._unbilled(spec, status)
            h._json(status, obj)
            return
        if fault == "hang":  # the provider made (and billed) the reply; the client never gets it
            if spec is not None:
                self._provider_reply(spec, route, body, messages, None, delivered=False)
            self._stopping.wait(self.plan.hang_s)
            h.close_connection = True
        if fault in FAULT_ERRORS:
            status, message, code = FAULT_ERRORS[fault]
            message = message.format(model=model)
            headers = {"Retry-After": _fmt_seconds(self.plan.retry_after_s)} \
                if fault == "rate_limit_retry_after" else None
            if fault != "hang":  # a hang's reply was billed above
                self._unbilled(spec, status)
            h._json(status, google_error(status, message) if google else _error(message, code), headers)
            return
        if self.provider is not None and spec is None:  # the emulation serves its catalogue only
            self.provider.ledger.unbilled(model, 404)
            h._json(404, not_found(route, model))
            return
        text = "" if fault == "empty_content" else NO_ACTION_REPLY if fault == "no_action" else None
        if spec is not None:
            status, obj = self._provider_reply(spec, route, body, messages, text,
                                               delivered=fault != "truncated_json")
        else:
            if text is None:
                text = apply_stop(self._reply(messages), body.get("stop"))
            status, obj = 200, _completion(body, messages, text)
        payload = json.dumps(obj).encode()
        if fault == "truncated_json" and status == 200:
            payload = payload[: len(payload) // 2]
        h._send(status, payload)

    def _provider_reply(self, spec: Any, route: str, body: dict[str, Any], messages: list[dict[str, Any]],
                        text: str | None, delivered: bool) -> tuple[int, dict[str, Any]]:
        assert self.provider is not None
        handle = {"chat": self.provider.chat, "gemini": self.provider.generate}.get(route, self.provider.embed)
        return handle(spec, body, messages, text, delivered=delivered)

    def _reply(self, messages: Sequence[dict[str, Any]], react_rate: float = 0.0) -> str:
        return reply_for(messages, react_rate, self.expert or None)


def _query_key(handler: _Handler) -> str | None:
    return (parse_qs(urlsplit(handler.path).query).get("key") or [None])[0]


def _fmt_seconds(s: float) -> str:
    return str(int(s)) if float(s).is_integer() else f"{s:g}"


def _error(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code, "param": None}}


def _completion(body: dict[str, Any], messages: list[dict[str, Any]], text: str) -> dict[str, Any]:
    prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
    return {
        "id": "chatcmpl-" + hashlib.sha1(f"{time.time_ns()}".encode()).hexdigest()[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or "fault"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": max(1, prompt_chars // 4),
                  "completion_tokens": len(text) // 4,
                  "total_tokens": max(1, prompt_chars // 4) + len(text) // 4},
    }


# ------------------------------------------------------------------------------ CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memrl.testing.fault_server",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help="0 = any free port (printed)")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    ap.add_argument("--fault-rate", type=float, default=0.0, help="spread evenly over all classes")
    ap.add_argument("--retry-after", type=float, default=1.0)
    ap.add_argument("--hang", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--expert", help="JSON file {first observation: [expert actions]}: expert reply mode")
    ap.add_argument("--provider", action="store_true",
                    help="answer as the hosted providers do (OpenAI and Gemini routes): their models, keys, "
                         "refusals, hidden reasoning spent from the budget and bills (docs/hosted-models.md); "
                         "without it, any model name gets a plain reply")
    ap.add_argument("--reasoning-scale", type=float, default=1.0,
                    help="multiplies every hidden reasoning draw of a reasoning model (0: none; large values "
                         "make budgets run out, as a real provider's long thinking would)")
    ap.add_argument("--react-rate", type=float, default=0.3,
                    help="share of ALFWorld replies written as 'Thought: ... / Action: ...' rather than a bare command")
    ap.add_argument("--api-key", help="answer 401 to requests without this key")
    args = ap.parse_args(argv)
    plan = FaultPlan.mixed(args.fault_rate, latency_s=args.latency, retry_after_s=args.retry_after,
                           hang_s=args.hang, seed=args.seed)
    expert = json.loads(open(args.expert, encoding="utf-8").read()) if args.expert else None
    provider = ProviderPlan(reasoning_scale=args.reasoning_scale, react_rate=args.react_rate,
                            seed=args.seed) if args.provider else None
    server = FaultServer(plan, port=args.port, expert=expert, provider=provider, api_key=args.api_key).start()
    info: dict[str, Any] = {"api_base": server.api_base, "port": server.port, "plan": asdict(plan)}
    if provider is not None:
        info.update(gemini_base=server.gemini_base, provider=asdict(provider))
    print(json.dumps(info), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
