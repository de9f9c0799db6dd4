"""Reading what an episode's shell server sends, with the harness's memory bounded.

The server answers each command with its output and a trailer that names the request's
nonce. Anything else can arrive on the same pipe too: a process of the episode that reaches
the server's descriptors can write into it at will. So the reader

* keeps at most `cap` bytes of a reply's body (the server sends at most the command's
  output cap plus one), drops the rest and counts it (`Reply.dropped`);
* drops and counts everything that arrives while no reply is expected;
* looks for the trailer once per byte: each chunk is searched together with the last
  `WINDOW` bytes before it (longer than any trailer), never the whole buffer again.

One reply is expected at a time (`expect`, then `wait`; a new `expect` abandons the last);
the pump thread does the matching. The server's stderr is read by the sandbox's `CappedReader`.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass

WINDOW = 128  # bytes kept back for a trailer split across chunks (a trailer is under 64)


@dataclass(frozen=True)
class Reply:
    body: bytes               # the bytes before the trailer, at most the reader's cap
    match: re.Match[bytes]    # the trailer
    dropped: int              # body bytes beyond the cap, dropped


class ReplyReader:
    """The server's stdout, read on a thread (see the module docstring)."""

    def __init__(self, stream, cap: int) -> None:
        self.cap = int(cap)
        self.eof = False
        self.junk = 0                      # bytes that arrived while no reply was expected
        self._stream = stream
        self._cond = threading.Condition()
        self._pattern: re.Pattern[bytes] | None = None
        self._body = bytearray()
        self._window = b""
        self._dropped = 0
        self._reply: Reply | None = None
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def expect(self, pattern: re.Pattern[bytes]) -> None:
        """The next reply ends with `pattern`: bytes from now on are its body."""
        with self._cond:
            self._pattern, self._reply = pattern, None
            self._body, self._window, self._dropped = bytearray(), b"", 0

    def wait(self, deadline: float) -> Reply | None:
        """The expected reply, or None when the pipe ended or `deadline` passed first."""
        with self._cond:
            while self._reply is None and not self.eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 1.0))
            reply, self._reply = self._reply, None
            return reply

    def _commit(self, data: bytes) -> None:
        room = self.cap - len(self._body)
        if room > 0:
            self._body += data[:room]
        self._dropped += max(0, len(data) - max(room, 0))

    def _feed(self, chunk: bytes) -> None:
        if self._pattern is None:
            self.junk += len(chunk)
            return
        data = self._window + chunk
        m = self._pattern.search(data)
        if m is None:
            keep = min(WINDOW, len(data))
            self._commit(data[:len(data) - keep])
            self._window = data[len(data) - keep:]
            return
        self._commit(data[:m.start()])
        self._reply = Reply(body=bytes(self._body), match=m, dropped=self._dropped)
        self._pattern, self._body, self._window = None, bytearray(), b""
        self.junk += len(data) - m.end()
        self._cond.notify_all()

    def _pump(self) -> None:
        try:
            while True:
                chunk = os.read(self._stream.fileno(), 65536)
                if not chunk:
                    break
                with self._cond:
                    self._feed(chunk)
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self.eof = True
                self._cond.notify_all()
