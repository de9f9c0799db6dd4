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
  hang                    no answer for `hang_s` (past the client's timeout)
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

A server made with `api_key=...` answers 401 to any request without that bearer key, as a
real provider does; `models=[...]` is what it lists at GET /v1/models (default: one model,
id "fault"), so a test can serve "another model under the same name".

The choice is a pure function of (seed, request content, how many times this content was seen
before), so a run that sends the same requests meets the same faults, whatever the thread
interleaving; a retry of a faulted request is a new draw (`cure_after=n`: its n-th and later
tries are never faulted). `sticky` rules fault every request whose last message contains all
of a rule's substrings (a call that fails after any number of retries). `counts()` (or
GET /stats) says what was injected; POST /reset zeroes it.

Normal replies are plausible ALFWorld actions derived from the prompt (look, inventory, go to
/ open the receptacles the room description lists, an occasional think:), so episodes run;
experience-writer prompts get a short plan or reflection. In expert reply mode (`expert=`,
`--expert FILE`) an ALFWorld game with a recorded expert trajectory gets the expert's next
action instead, so its episode ends when the expert's did (scripts/bench_throughput.py).

CLI (for benchmarks that keep the server out of the client's process):
    python -m memrl.testing.fault_server --port 8765 --latency 0.5 --fault-rate 0.2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

TRANSIENT_FAULTS = ("rate_limit_retry_after", "rate_limit", "server_error", "unavailable", "hang",
                    "truncated_json", "empty_content", "no_action")
FATAL_FAULTS = ("auth_error", "permission_denied", "model_not_found", "bad_request", "context_window")
FAULTS = TRANSIENT_FAULTS + FATAL_FAULTS
NO_ACTION_REPLY = "  >  "


@dataclass
class FaultPlan:
    """What the server injects. `rates` maps a fault name (FAULTS) to a probability per request;
    the rates must sum to at most 1."""

    rates: dict[str, float] = field(default_factory=dict)
    latency_s: float = 0.0          # added to every request before it is answered
    retry_after_s: float = 1.0      # the Retry-After value of `rate_limit_retry_after`
    hang_s: float = 30.0            # how long a `hang` keeps the request open
    seed: int = 0
    sticky: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    cure_after: int | None = None   # the n-th and later tries of one request are never faulted
    limit_requests: int | None = None  # a rate limit: requests answered per window (module doc)
    limit_window_s: float = 1.0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rates) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault names {unknown}; known: {FAULTS}")
        if any(r < 0 for r in self.rates.values()) or sum(self.rates.values()) > 1 + 1e-9:
            raise ValueError(f"fault rates must be >= 0 and sum to <= 1, got {self.rates}")
        for subs, name in self.sticky:
            if name not in FAULTS:
                raise ValueError(f"sticky fault {name!r} is not one of {FAULTS}")
            if not subs:
                raise ValueError("a sticky rule needs at least one substring")
        if self.limit_requests is not None and (self.limit_requests < 1 or self.limit_window_s <= 0):
            raise ValueError("limit_requests must be >= 1 and limit_window_s > 0")
        if self.latency_s < 0 or self.hang_s < 0 or self.retry_after_s < 0:
            raise ValueError("latency_s, hang_s and retry_after_s must be >= 0")

    @classmethod
    def mixed(cls, fault_rate: float, **kw: Any) -> "FaultPlan":
        """`fault_rate` spread evenly over every transient fault class."""
        return cls(rates={name: fault_rate / len(TRANSIENT_FAULTS) for name in TRANSIENT_FAULTS}, **kw)

    def choose(self, content_key: str, attempt: int, last_message: str) -> str | None:
        """The fault for this request, or None for a normal reply."""
        for subs, name in self.sticky:
            if all(s in last_message for s in subs):
                return name
        if self.cure_after is not None and attempt >= self.cure_after:
            return None
        digest = hashlib.sha256(f"{self.seed}:{content_key}:{attempt}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        acc = 0.0
        for name in FAULTS:
            acc += self.rates.get(name, 0.0)
            if u < acc:
                return name
        return None


# ------------------------------------------------------------------------------ replies
_RECEPTACLES = re.compile(r"you see (.*?)\.\s*$", re.MULTILINE)
_ITEM = re.compile(r"(?:an?|the)\s+([a-z]+(?: [a-z]+)* \d+)")


def _receptacles(prompt: str) -> list[str]:
    """Receptacles of the episode's room ('you see a cabinet 1, a drawer 2, ...')."""
    episode = prompt.rsplit("Here is your task.", 1)[-1]
    m = _RECEPTACLES.search(episode)
    return _ITEM.findall(m.group(1)) if m else []


def alfworld_action(prompt: str) -> str:
    """A plausible next ALFWorld command for a ReAct prompt: a fixed tour of the room, as a
    weak agent would make it (look, inventory, then go to / open each receptacle)."""
    episode = prompt.rsplit("Here is your task.", 1)[-1]
    step = sum(1 for line in episode.splitlines() if line.startswith("> "))
    places = _receptacles(prompt) or ["cabinet 1", "countertop 1", "drawer 1"]
    tour: list[str] = ["look", "think: I should search the receptacles one by one.", "inventory"]
    for place in places:
        tour += [f"go to {place}", f"open {place}", f"examine {place}"]
    return tour[step % len(tour)]


def reply_for(messages: Sequence[dict[str, Any]]) -> str:
    """The normal (unfaulted) reply to a chat request."""
    last = str(messages[-1].get("content") or "") if messages else ""
    if last.rstrip().endswith("Plan:\n1.") or "Plan:\n1." in last[-20:]:
        return " Go to the place where the target object usually is.\n2. Take it.\n" \
               "3. Bring it to the goal receptacle and put it there."
    if last.rstrip().endswith("Reflection:"):
        return " The agent toured the room without finding the object; next time it should " \
               "open the receptacles where such objects are usually kept first."
    if "Here is your task." in last or last.rstrip().endswith(">"):
        return " " + alfworld_action(last)
    return "OK."


# ----------------------------------------------------------------- expert reply mode
# `FaultServer(expert=...)` / `--expert FILE`: for an ALFWorld episode whose first
# observation is in the table, the reply is the next action of that game's recorded expert
# trajectory (scripts/bench_throughput.py records them once with agent=expert), so the
# episode ends when the expert's did; other games, and steps past the trajectory, get the
# fixed tour above. The table maps the episode's first observation (the task start the
# ReAct prompt shows after "Here is your task.") to the expert's actions.
def episode_start(prompt: str) -> tuple[str, int]:
    """(the episode's first observation, how many actions it has taken) of a ReAct prompt."""
    episode = prompt.rsplit("Here is your task.\n", 1)[-1]
    lines = episode.split("\n")
    head: list[str] = []
    for line in lines:
        if line.startswith("> ") or line == ">":
            break
        head.append(line)
    return "\n".join(head).strip(), sum(1 for line in lines if line.startswith("> "))


def expert_action(prompt: str, trajectories: dict[str, list[str]]) -> str | None:
    """The recorded expert's next action for this prompt's game, or None (not recorded, or
    past the end of its trajectory)."""
    start, step = episode_start(prompt)
    actions = trajectories.get(start)
    return actions[step] if actions is not None and step < len(actions) else None


def _apply_stop(text: str, stop: Any) -> str:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    cut = len(text)
    for s in stops:
        if s:
            i = text.find(s)
            if i >= 0:
                cut = min(cut, i)
    return text[:cut]


def content_key(body: dict[str, Any]) -> str:
    """What identifies 'the same request' for the repeatable fault draw."""
    keep = {k: body.get(k) for k in ("model", "messages", "max_tokens", "stop", "temperature",
                                     "top_p", "seed")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


# ------------------------------------------------------------------------------ server
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients pool their connections
    # Headers and body go out in two writes: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK (~40 ms per reply on Linux), which would be measured as latency.
    disable_nagle_algorithm = True
    server: "_HTTPServer"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
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

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path.rstrip("/") == "/stats":
            self._json(200, self.server.owner.counts())
        elif self.path.rstrip("/") in ("/v1/models", "/models"):
            if not self.server.owner.authorized(self):
                self._json(401, _error("invalid api key (checked by the fault server)", "invalid_api_key"))
                return
            self._json(200, {"object": "list", "data": self.server.owner.models})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") == "/reset":
            self.server.owner.reset()
            self._json(200, {"ok": True})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw or b"{}")
            messages = list(body.get("messages") or [])
        except (ValueError, TypeError):
            self._json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
            return
        try:
            self.server.owner.answer(self, body, messages)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. after a hang)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many clients connecting at once must not be refused
    owner: "FaultServer"


class FaultServer:
    """The server, run in a background thread. Use as a context manager or start()/stop()."""

    def __init__(self, plan: FaultPlan | None = None, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None, models: list[dict[str, Any]] | None = None,
                 expert: dict[str, list[str]] | None = None):
        self.plan = plan or FaultPlan()
        self.expert = {k.strip(): list(v) for k, v in (expert or {}).items()}  # expert reply mode
        self.api_key = api_key
        self.models = list(models) if models is not None else [{"id": "fault", "object": "model"}]
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
        the total injected latency and the most requests in flight at once."""
        with self._lock:
            out: dict[str, Any] = {"requests": self._counts["requests"], "ok": self._counts["ok"]}
            for name in FAULTS:
                out[name] = self._counts[name]
            out["faults"] = sum(self._counts[n] for n in FAULTS)
            out["over_limit"] = self._counts["over_limit"]
            out["latency_total_s"] = round(self._latency_total, 6)
            out["max_in_flight"] = self._max_in_flight
        return out

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()
            self._counts.clear()
            self._latency_total = 0.0
            self._max_in_flight = 0
            self._admitted.clear()

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

    def authorized(self, handler: _Handler) -> bool:
        return self.api_key is None or handler.headers.get("Authorization") == f"Bearer {self.api_key}"

    # -- one request ------------------------------------------------------------------
    def answer(self, handler: _Handler, body: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        wait = self.over_limit()
        if wait is not None:
            handler._json(429, _error("rate limit reached: too many requests in the window (injected)",
                                      "rate_limit_exceeded"),
                          {"Retry-After": str(max(1, math.ceil(wait))),
                           "retry-after-ms": str(max(1, math.ceil(wait * 1000)))})
            return
        key = content_key(body)
        last = str(messages[-1].get("content") or "") if messages else ""
        with self._lock:
            attempt = self._seen[key]
            self._seen[key] += 1
            self._counts["requests"] += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        fault = self.plan.choose(key, attempt, last)
        if not self.authorized(handler):
            fault = "auth_error"
        try:
            if self.plan.latency_s:
                self._stopping.wait(self.plan.latency_s)
            with self._lock:
                self._latency_total += self.plan.latency_s
                self._counts[fault or "ok"] += 1
            self._respond(handler, fault, body, messages)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _respond(self, h: _Handler, fault: str | None, body: dict[str, Any],
                 messages: list[dict[str, Any]]) -> None:
        if fault == "rate_limit_retry_after":
            h._json(429, _error("rate limit reached (injected)", "rate_limit_exceeded"),
                    {"Retry-After": _fmt_seconds(self.plan.retry_after_s)})
        elif fault == "rate_limit":
            h._json(429, _error("rate limit reached (injected)", "rate_limit_exceeded"))
        elif fault == "server_error":
            h._json(500, _error("internal server error (injected)", "server_error"))
        elif fault == "unavailable":
            h._json(503, _error("service unavailable (injected)", "server_error"))
        elif fault == "auth_error":
            h._json(401, _error("Incorrect API key provided (injected)", "invalid_api_key"))
        elif fault == "permission_denied":
            h._json(403, _error("this key may not use this model (injected)", "permission_denied"))
        elif fault == "model_not_found":
            h._json(404, _error(f"The model `{body.get('model')}` does not exist (injected)",
                                "model_not_found"))
        elif fault == "bad_request":
            h._json(400, _error("Unrecognized request argument (injected)", "invalid_request_error"))
        elif fault == "context_window":
            h._json(400, _error("This model's maximum context length is 4096 tokens. However, your "
                                "messages resulted in 9000 tokens. (injected)", "context_length_exceeded"))
        elif fault == "hang":
            self._stopping.wait(self.plan.hang_s)
            h.close_connection = True
            h._json(504, _error("hung request (injected)", "timeout"))
        else:
            if fault == "empty_content":
                text = ""
            elif fault == "no_action":
                text = NO_ACTION_REPLY
            else:
                text = _apply_stop(self._reply(messages), body.get("stop"))
            payload = json.dumps(_completion(body, messages, text)).encode()
            if fault == "truncated_json":
                payload = payload[: len(payload) // 2]
            h._send(200, payload)


    def _reply(self, messages: list[dict[str, Any]]) -> str:
        last = str(messages[-1].get("content") or "") if messages else ""
        if self.expert and "Here is your task." in last:
            action = expert_action(last, self.expert)
            if action is not None:
                return " " + action
        return reply_for(messages)


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
    args = ap.parse_args(argv)
    plan = FaultPlan.mixed(args.fault_rate, latency_s=args.latency, retry_after_s=args.retry_after,
                           hang_s=args.hang, seed=args.seed)
    expert = json.loads(open(args.expert, encoding="utf-8").read()) if args.expert else None
    server = FaultServer(plan, port=args.port, expert=expert).start()
    print(json.dumps({"api_base": server.api_base, "port": server.port, "plan": asdict(plan)}), flush=True)
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
