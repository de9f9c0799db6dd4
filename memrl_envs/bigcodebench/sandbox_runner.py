"""Runs INSIDE the sandbox (copied into its work folder, started by the host's interpreter):
bigcodebench's own checker on one solution, and one result on a channel of its own.

Two processes, so that the code under test can neither break nor forge the result:

* the reporter (`python -I sandbox_runner.py <result fd>`, the sandbox's first program) holds
  the result channel, a pipe the host passed in at `<result fd>`. It makes itself
  non-dumpable at once, so no process of the sandbox can open its `/proc/<pid>/fd/*` or
  `/proc/<pid>/mem` or ptrace it, reads the request on stdin, and starts the checker as a
  fresh process (close_fds: the channel is not among its descriptors), which never holds the
  channel;
* the checker (`... sandbox_runner.py --check <details fd>`) makes itself non-dumpable too
  before anything else, imports bigcodebench, says `ready` on its details pipe, runs
  `untrusted_check` (which forks the test process: the code under test and its tests, made
  dumpable again as upstream runs it), writes the details as one line and exits with a code
  that carries the verdict and how the test process ended (`exit_code`). The code under test
  is a fork of the checker: it can write to the details pipe and to stdout, but it cannot
  read or write the checker's memory (the kernel refuses `/proc/<pid>/mem`, ptrace and
  `process_vm_*` on a non-dumpable process of the same uid), so it cannot choose the checker's
  exit status; it can only kill the checker (no result: a failure).

The reporter takes the verdict from the checker's exit status, the details from the last line
of the details pipe when that line agrees with it (else none, and `tampered` says why), and
writes on the channel `ready` (a line, as soon as the checker said it) and then one JSON
object: status (pass | fail | timeout | harness_error, or no_result when the checker died),
test_process (how the checker saw it end: exited | exited_nonzero | signaled | running at the
time limit), ready, details, unimportable, error, tampered. A verdict that disagrees with what
the checker itself saw is flagged in `tampered`: a pass whose test process did not exit with
status 0 before the limit, or a pass with failed tests in its details (bigcodebench turns
those into a fail). What the program prints (fd 1 and 2, any size, with or without newlines)
is never read for a verdict.

What stays inherent (docs/sandboxes.md): bigcodebench runs the tests in the same process as
the code, so code can still monkeypatch `unittest`, empty the details or set the checker's
shared status value itself; a pass forged that way is the same pass as upstream's.

Only the standard library and bigcodebench are used, so this file must stay self-contained.
"""

import ctypes
import importlib
import json
import os
import select
import subprocess
import sys
import threading
import time

MAX_TRACE = 4000
MAX_DETAILS = 2_000_000      # bytes read from the details pipe; the rest is dropped
DRAIN_S = 2.0                # at most this long reading what is left once the checker exited
READY = b"ready\n"
FRAME = "MEMRL-CHECK "       # the checker's details line: FRAME + json
# The checker's exit status carries its verdict and how it saw the test process end:
# 16 + 4 * verdict + ending, or HARNESS_ERROR (no test process ran)
VERDICTS = ("pass", "fail", "timeout")
ENDINGS = ("exited", "exited_nonzero", "signaled", "running")  # running: still, at the time limit
HARNESS_ERROR = 13
PR_SET_DUMPABLE = 4


def exit_code(status, ending):
    return 16 + 4 * VERDICTS.index(status) + ENDINGS.index(ending)


def decode(code):
    """(status, ending) from the checker's exit status; None for any other status."""
    if code == HARNESS_ERROR:
        return "harness_error", ""
    if isinstance(code, int) and 16 <= code < 16 + 4 * len(VERDICTS):
        return VERDICTS[(code - 16) // 4], ENDINGS[(code - 16) % 4]
    return None


def _set_dumpable(value):
    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, value, 0, 0, 0) == 0


def _unimportable(modules):
    """Modules of the task that cannot be imported in this interpreter, with the reason."""
    out = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # any failure to import counts
            out[name] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _watch(checker):
    """Patch bigcodebench's test process: it becomes dumpable again (as upstream runs it: the
    checker alone is out of its reach), the checker notes when it started, and its join waits
    on its exit status, not on its sentinel pipe (`multiprocessing.Process.join` waits for that
    pipe to close, and a process the code under test leaves behind inherits it: the checker
    would then wait out the whole time limit after honest code has finished). The join polls
    `is_alive`, bounded by the same timeout bigcodebench asks for, and notes whether the test
    process was still running at the limit. Returns what was seen, filled in as it runs."""
    import multiprocessing

    seen = {}
    run_tests = checker.unsafe_execute

    def tested(*args):
        _set_dumpable(1)
        run_tests(*args)

    checker.unsafe_execute = tested
    start = multiprocessing.Process.start

    def start_noted(self):
        if self._target is tested:
            seen["process"], seen["start"] = self, time.monotonic()
        start(self)

    def join(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.01)
        if seen.get("process") is self:
            seen["running"] = self.is_alive()
            seen["seconds"] = round(time.monotonic() - seen["start"], 3)

    multiprocessing.Process.start = start_noted
    multiprocessing.Process.join = join
    return seen


def _ending(seen):
    proc = seen.get("process")
    if proc is None or seen.get("running", True):
        return "running"
    code = proc.exitcode
    return "exited" if code == 0 else ("exited_nonzero" if code and code > 0 else "signaled")


def check(details_fd, req):
    """The checker process: the verdict is its exit code, the details one line on `details_fd`."""
    def harness_error(message):
        _write_all(details_fd, b"\n" + (FRAME + json.dumps({"status": "harness_error", "error": message})).encode()
                   + b"\n")
        return HARNESS_ERROR

    if not _set_dumpable(0):  # before any process of the code under test can exist
        return harness_error("could not make the checker non-dumpable")
    try:
        import bigcodebench.eval as checker
    except BaseException as exc:
        return harness_error(f"cannot import bigcodebench.eval: {type(exc).__name__}: {exc}")
    # bigcodebench reads its per-task limit from an env var that crashes when set (str vs
    # float); the module attribute is the reliable knob. min/gt limits of 1 s make the
    # effective limit max(TIMEOUT_LIMIT, 1) + 1, as in the benchmark with its default 240 s.
    os.environ.pop("BIGCODEBENCH_TIMEOUT_PER_TASK", None)
    checker.TIMEOUT_LIMIT = float(req["time_limit_s"])
    seen = _watch(checker)
    _write_all(details_fd, READY)   # before any process of the code under test exists
    status, details = checker.untrusted_check(
        req["code"], req["test"], req["entry_point"],
        req["max_as_mb"], req["max_data_mb"], req["max_stack_mb"],
        min_time_limit=1, gt_time_limit=1)
    status = status if status in VERDICTS else "fail"
    ending = _ending(seen)
    proc = seen.get("process")
    result = {"status": status,
              "details": {str(k): str(v)[-MAX_TRACE:] for k, v in dict(details).items()},
              "test_process": {"ending": ending, "exitcode": proc.exitcode if proc is not None else None,
                               "seconds": seen.get("seconds")}}
    if status != "pass":
        result["unimportable"] = _unimportable(req.get("modules", []))
    _write_all(details_fd, b"\n" + (FRAME + json.dumps(result)).encode() + b"\n")
    return exit_code(status, ending)


def _drain(fd, buf, done, on_ready):
    """Read `fd` into `buf` (capped) until EOF, or, once `done` is set (the checker has exited,
    so all it wrote is in the pipe), until the pipe is empty or DRAIN_S has passed: processes
    the checker forked (its Manager, a daemon of the code) may hold the pipe open."""
    deadline = None
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        if done.is_set() and deadline is None:
            deadline = time.monotonic() + DRAIN_S
        if not poller.poll(200 if deadline is None else 50):
            if deadline is not None:
                return
            continue
        chunk = os.read(fd, 65536)
        if not chunk or (deadline is not None and time.monotonic() >= deadline):
            return
        room = MAX_DETAILS - len(buf)
        if room > 0:
            fresh = len(buf) < len(READY)
            buf += chunk[:room]
            if fresh and buf.startswith(READY):
                on_ready()


def reported(code, data):
    """The result from the checker's exit status and what its details pipe held."""
    ready = data.startswith(READY)
    verdict = decode(code)
    status, ending = verdict if verdict is not None else ("no_result", "")
    result = {"status": status, "test_process": ending, "ready": ready, "details": {}, "unimportable": {},
              "error": "", "exit": code}
    frames = [ln for ln in data.decode("utf-8", "replace").split("\n") if ln.startswith(FRAME)]
    flags = []
    if verdict is None:
        if frames:
            result["tampered"] = "a result line without the checker's exit status"
        return result
    if status == "pass" and ending != "exited":
        flags.append(f"the checker says pass, yet it saw the test process end {ending}")
    payload = None
    if frames:
        try:
            payload = json.loads(frames[-1][len(FRAME):])
        except ValueError:
            payload = None
    seen = payload.get("test_process") if isinstance(payload, dict) else None
    if (not isinstance(payload, dict) or payload.get("status") != status
            or (ending and (not isinstance(seen, dict) or seen.get("ending") != ending))):
        flags.append("the details line does not match the checker's exit status" if frames else "no details line")
        result["tampered"] = "; ".join(flags)
        return result
    if len(frames) > 1:
        flags.append(f"{len(frames)} details lines (the checker writes one)")
    details = payload.get("details")
    result["details"] = details if isinstance(details, dict) else {}
    if status == "pass" and result["details"]:
        flags.append("the checker says pass with failed tests in its details")
    if isinstance(seen, dict):
        result["test_exitcode"], result["test_seconds"] = seen.get("exitcode"), seen.get("seconds")
    unimportable = payload.get("unimportable")
    result["unimportable"] = unimportable if isinstance(unimportable, dict) else {}
    result["error"] = str(payload.get("error", ""))
    if flags:
        result["tampered"] = "; ".join(flags)
    return result


def report(result_fd):
    """The reporter: start the checker, wait for it, write the result on `result_fd`."""
    if not _set_dumpable(0):
        raise SystemExit("could not make the reporter non-dumpable")
    os.set_inheritable(result_fd, False)
    request = sys.stdin.buffer.read()
    details_r, details_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), "--check", str(details_w)],
                            stdin=subprocess.PIPE, pass_fds=(details_w,), close_fds=True)
    os.close(details_w)
    buf, done = bytearray(), threading.Event()
    reader = threading.Thread(target=_drain, args=(details_r, buf, done,
                                                   lambda: _write_all(result_fd, READY)), daemon=True)
    reader.start()
    try:
        proc.stdin.write(request)
        proc.stdin.close()
    except OSError:
        pass
    code = proc.wait()
    done.set()
    reader.join()
    _write_all(result_fd, json.dumps(reported(code, bytes(buf))).encode())
    os.close(result_fd)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        code = check(int(sys.argv[2]), json.loads(sys.stdin.read()))
        sys.stdout.flush()
        sys.stderr.flush()
        # the checker's Manager processes may still be alive; the sandbox ends them all
        os._exit(code)
    report(int(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
