"""The OS shell's reply reader: a reply's body is capped, what arrives unasked is dropped and
counted, a trailer split across chunks is found, and the harness never holds more than the cap
however much is written into the pipe."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

from memrl_envs.lifelong_os.shell_reader import WINDOW, ReplyReader
from memrl_envs.sandbox import CappedReader

pytestmark = pytest.mark.serial  # times or samples the host: runs alone (Makefile, test)


def _reader(cap: int):
    r, w = os.pipe()
    return ReplyReader(os.fdopen(r, "rb", buffering=0), cap=cap), w


def _write(w: int, *parts: bytes) -> None:
    for part in parts:
        view = memoryview(part)
        while view:
            view = view[os.write(w, view):]


def test_a_reply_split_at_every_position_of_its_trailer_is_found_whole():
    trailer = b"\nabc123 7\n"
    for cut in range(1, len(trailer)):
        reader, w = _reader(cap=100)
        reader.expect(re.compile(rb"\nabc123 (-?\d+)\n"))
        _write(w, b"hello" + trailer[:cut])
        time.sleep(0.02)
        _write(w, trailer[cut:])
        reply = reader.wait(time.monotonic() + 5)
        assert reply is not None and (reply.body, reply.match.group(1), reply.dropped) == (b"hello", b"7", 0)
        os.close(w)


def test_floods_are_dropped_and_counted_never_held():
    reader, w = _reader(cap=1000)
    _write(w, b"j" * 300_000)        # unasked: junk
    time.sleep(0.2)
    reader.expect(re.compile(rb"\nN1 (-?\d+)\n"))
    flood = 64 * 2**20               # 64 MB into the body
    writer = threading.Thread(target=_write, args=(w, b"x" * flood, b"\nN1 0\n", b"after" * 10))
    writer.start()
    peak = 0
    deadline = time.monotonic() + 60
    reply = None
    while reply is None and time.monotonic() < deadline:
        peak = max(peak, len(reader._body) + len(reader._window))
        reply = reader.wait(time.monotonic() + 0.01)
    writer.join()
    assert reply is not None
    assert reply.body == b"x" * 1000 and reply.dropped == flood - 1000
    assert peak <= 1000 + WINDOW
    time.sleep(0.1)
    assert reader.junk >= 300_000
    os.close(w)


def test_a_deadline_without_the_trailer_is_none_and_the_next_request_starts_afresh():
    reader, w = _reader(cap=10)
    reader.expect(re.compile(rb"\nZZ (-?\d+)\n"))
    _write(w, b"partial")
    assert reader.wait(time.monotonic() + 0.2) is None
    reader.expect(re.compile(rb"\nYY (-?\d+)\n"))
    _write(w, b"\nZZ 0\nnew\nYY 3\nlate")
    reply = reader.wait(time.monotonic() + 5)
    assert reply is not None and reply.match.group(1) == b"3" and reply.body.endswith(b"new")
    assert b"partial" not in reply.body
    time.sleep(0.1)
    assert reader.junk == 4  # "late": no reply was expected any more
    os.close(w)
    time.sleep(0.1)
    assert reader.eof


def test_the_stderr_reader_keeps_its_cap():
    r, w = os.pipe()
    tail = CappedReader(os.fdopen(r, "rb", buffering=0), 50)
    _write(w, b"e" * 10_000)
    os.close(w)
    tail.thread.join(5)
    assert tail.text() == "e" * 50 and tail.dropped == 9_950
