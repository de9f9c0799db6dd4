"""Runs INSIDE the sandbox (copied into its work folder, started by the host's interpreter):
bigcodebench's own checker on one solution, and one result on a channel of its own.

Two processes, so that the code under test can neither break nor forge the result:

* the reporter (`python -I sandbox_runner.py <result fd>`, the sandbox's first program) holds
  the result channel, a pipe the host passed in at `<result fd>`. It makes itself
  non-dumpable at once, so no process of the sandbox can open its `/proc/<pid>/fd/*` or
  ptrace it, reads the request on stdin, and starts the checker as a fresh process (close_fds:
  the channel is not among its descriptors), which never holds the channel;
* the checker (`... sandbox_runner.py --check <details fd>`) imports bigcodebench, says
  `ready` on its details pipe, runs `untrusted_check` (which forks the process that runs the
  code under test), writes the details as one line and exits with a code that carries the
  verdict (`EXIT_CODES`). The code under test is a fork of the checker: it can write to the
  details pipe and to stdout, but not choose the checker's exit status.

The reporter takes the verdict from the checker's exit status, the details from the last line
of the details pipe when that line agrees with it (else none, and `tampered` says why), and
writes on the channel `ready` (a line, as soon as the checker said it) and then one JSON
object: status (pass | fail | timeout | harness_error, or
no_result when the checker died), ready, details, unimportable, error, tampered. What the
program prints (fd 1 and 2, any size, with or without newlines) is never read for a verdict.

What stays inherent (README, "What a sandbox can and cannot do"): bigcodebench runs the tests
in the same process as the code, so code can still monkeypatch `unittest` or set the
checker's shared status value itself.

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
EXIT_CODES = {"pass": 10, "fail": 11, "timeout": 12, "harness_error": 13}
STATUS_OF = {code: status for status, code in EXIT_CODES.items()}
PR_SET_DUMPABLE = 4


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


def _join_by_exit_status():
    """`multiprocessing.Process.join` waits for the child's sentinel pipe to close, and a process
    the code under test leaves behind inherits that pipe: the checker then waits out the whole
    time limit after honest code has finished. Joining by the child's exit status instead (poll
    `is_alive`, the same wait bigcodebench asks for, bounded by the same timeout) ends when the
    child does."""
    import multiprocessing

    def join(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.01)

    multiprocessing.Process.join = join


def check(details_fd, req):
    """The checker process: the verdict is its exit code, the details one line on `details_fd`."""
    try:
        import bigcodebench.eval as checker
    except BaseException as exc:
        _write_all(details_fd, b"\n" + (FRAME + json.dumps({
            "status": "harness_error",
            "error": f"cannot import bigcodebench.eval: {type(exc).__name__}: {exc}"})).encode() + b"\n")
        return EXIT_CODES["harness_error"]
    # bigcodebench reads its per-task limit from an env var that crashes when set (str vs
    # float); the module attribute is the reliable knob. min/gt limits of 1 s make the
    # effective limit max(TIMEOUT_LIMIT, 1) + 1, as in the benchmark with its default 240 s.
    os.environ.pop("BIGCODEBENCH_TIMEOUT_PER_TASK", None)
    checker.TIMEOUT_LIMIT = float(req["time_limit_s"])
    _join_by_exit_status()
    _write_all(details_fd, READY)   # before any process of the code under test exists
    status, details = checker.untrusted_check(
        req["code"], req["test"], req["entry_point"],
        req["max_as_mb"], req["max_data_mb"], req["max_stack_mb"],
        min_time_limit=1, gt_time_limit=1)
    status = status if status in EXIT_CODES else "fail"
    result = {"status": status,
              "details": {str(k): str(v)[-MAX_TRACE:] for k, v in dict(details).items()}}
    if status != "pass":
        result["unimportable"] = _unimportable(req.get("modules", []))
    _write_all(details_fd, b"\n" + (FRAME + json.dumps(result)).encode() + b"\n")
    return EXIT_CODES[status]


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


def reported(exit_code, data):
    """The result from the checker's exit status and what its details pipe held."""
    ready = data.startswith(READY)
    status = STATUS_OF.get(exit_code)
    result = {"status": status or "no_result", "ready": ready, "details": {}, "unimportable": {},
              "error": "", "exit": exit_code}
    frames = [ln for ln in data.decode("utf-8", "replace").split("\n") if ln.startswith(FRAME)]
    if status is None:
        if frames:
            result["tampered"] = "a result line without the checker's exit status"
        return result
    payload = None
    if frames:
        try:
            payload = json.loads(frames[-1][len(FRAME):])
        except ValueError:
            payload = None
    if not isinstance(payload, dict) or payload.get("status") != status:
        result["tampered"] = ("the details line does not match the checker's exit status"
                              if frames else "no details line")
        return result
    if len(frames) > 1:
        result["tampered"] = f"{len(frames)} details lines (the checker writes one)"
    details = payload.get("details")
    result["details"] = details if isinstance(details, dict) else {}
    unimportable = payload.get("unimportable")
    result["unimportable"] = unimportable if isinstance(unimportable, dict) else {}
    result["error"] = str(payload.get("error", ""))
    return result


def report(result_fd):
    """The reporter: start the checker, wait for it, write the result on `result_fd`."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
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
