"""Running a solution against its task's tests: bigcodebench's own checker
(`bigcodebench.eval.untrusted_check`), inside the project's sandbox.

Why the benchmark's checker rather than a runner of our own: the pass/fail/timeout semantics
(code and tests in one module, `TestCases` loaded and run under a time limit, any failure or
error fails the task, its memory limits, its patched kill/exec functions) are then exactly the
benchmark's. Its checker is no security boundary (its docstring says so), so all of it runs
under `memrl_envs.sandbox.run_isolated` in its host-root mode: only the interpreter, its
libraries, /usr, /lib and a minimal /etc visible (read-only), kernel interfaces masked, a
private /tmp, a fresh work folder on a capped tmpfs (seeded with the runner and the font
cache), an empty environment, no network, its own uid, a memory and a pids cgroup for the
whole sandbox, per-process limits, and every process killed at the end (the checker's helper
processes can outlive a timeout). At start the executor checks that `max_parallel` sandboxes
at their caps fit the machine (`memrl_envs.sandbox.fit`), lowers the parallelism otherwise,
and says which caps this machine cannot enforce (`facts()`, for the run card and the log).

Each check costs ~1 s of start-up (interpreter, numpy, matplotlib with a font cache that is
built once on the host and copied in) on top of the task's own tests.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from memrl_envs.sandbox import Limits, SandboxResult, caps_report, log_sandbox_facts, plan_parallel, run_isolated

log = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("sandbox_runner.py")
# the runner's words (sandbox_runner.py must stay self-contained, so they are repeated there;
# a test checks the two agree): its details line, and its channel's first line
FRAME = "MEMRL-CHECK "
READY = b"ready\n"
STACK_MB = 10          # bigcodebench's default max_stack_limit
STARTUP_SLACK_S = 30.0  # interpreter + imports + the checker's join slack, beyond the test limit
MAX_TMPDIR_CHARS = 60
# Variables passed into the sandbox from the host when set (CPU quirks of OpenBLAS builds,
# nltk data that was installed on the host).
PASS_THROUGH = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "NLTK_DATA")
PATH_VARS = ("NLTK_DATA",)  # of those, folders the sandbox is shown (read-only)
SEED_MB = 16  # host disk per sandbox: its seed folder (the runner and the font cache)
CHANNEL_BYTES = 4_000_000  # the runner's result (details of every failed test, cut to size)


@dataclass
class CheckResult:
    """What one sandboxed check produced.

    status: pass | fail | timeout (the checker's words, carried by its exit status), or
    "no_result" when the checker or its reporter died before reporting, or the sandbox was
    killed at its wall limit, or "harness_error" (bigcodebench could not run at all).
    """

    status: str
    details: dict[str, str] = field(default_factory=dict)
    unimportable: dict[str, str] = field(default_factory=dict)
    ready: bool = False             # the runner had imported the checker
    sandbox_timed_out: bool = False
    returncode: int | None = None
    error: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0
    # why this result is suspect ("": nothing seen): the checker's details disagreed with its
    # exit status, a pass disagreed with what the checker or the host saw, or the program
    # printed the checker's framing
    tampered: str = ""
    # how the checker saw the test process end (sandbox_runner.ENDINGS; "" when none ran),
    # with its exit code (negative: a signal) and seconds, as the checker's details say
    test_process: str = ""
    test_exitcode: int | None = None
    test_seconds: float | None = None
    oom_kills: int | None = None    # processes the sandbox's memory cap killed (host's count)


def imported_modules(code: str) -> list[str]:
    """Top-level modules that `code` imports (absolute imports, anywhere in it)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module.split(".")[0])
    return list(dict.fromkeys(names))


def required_modules(libs: Iterable[str], test_code: str) -> list[str]:
    """The task's libraries plus the top-level modules its test imports (deduplicated)."""
    names = [lib.split(".")[0] for lib in libs if lib] + imported_modules(test_code)
    return list(dict.fromkeys(n for n in names if n.isidentifier()))


class FontCache:
    """matplotlib's font list, built once on the host and copied into each sandbox (building it
    from scratch inside every sandbox costs ~7 s)."""

    def __init__(self, cache_dir: Path) -> None:
        self.dir = cache_dir
        self._lock = threading.Lock()
        self._ready: bool | None = None

    def files(self) -> list[Path]:
        with self._lock:
            if self._ready is None:
                self._ready = self._build()
            return sorted(self.dir.glob("fontlist-*.json")) if self._ready else []

    def _build(self) -> bool:
        if any(self.dir.glob("fontlist-*.json")):
            return True
        tmp = Path(tempfile.mkdtemp(prefix="mplcache-", dir=self.dir.parent if self.dir.parent.exists() else None))
        try:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MPLCONFIGDIR": str(tmp),
                   "MPLBACKEND": "Agg", "HOME": str(tmp)}
            subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env,
                           capture_output=True, timeout=300, check=True)
            self.dir.mkdir(parents=True, exist_ok=True)
            for f in tmp.glob("fontlist-*.json"):
                os.replace(f, self.dir / f.name)
            return any(self.dir.glob("fontlist-*.json"))
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("could not prebuild matplotlib's font cache (%s); sandboxes build their own", exc)
            return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class Executor:
    """Checks solutions in sandboxes, at most `parallel` at once (thread-safe): `max_parallel`
    (default: the CPU count), lowered to what fits the machine at the caps. Each check gets a
    fresh seed folder under `work_root` (default: the system's temp folder), removed when the
    check returns; the sandbox works on a tmpfs copy of it of `disk_mb`. The sandbox is killed
    `slack_s` after the test time limit (start-up, imports and the checker's own grace second
    need a few of them). Caps: `memory_mb` per process (the benchmark's address-space limit),
    `sandbox_memory_mb` for the whole sandbox (its tmpfs folders included), `nproc` processes
    and threads, `tmp_mb` for each of /tmp and /dev/shm."""

    def __init__(self, *, time_limit_s: float = 240.0, memory_mb: int = 4096, nproc: int = 256,
                 file_mb: int = 256, cache_dir: str | os.PathLike[str] | None = None,
                 max_parallel: int | None = None,
                 work_root: str | os.PathLike[str] | None = None,
                 slack_s: float = STARTUP_SLACK_S, sandbox_memory_mb: int | None = 4096,
                 disk_mb: int | None = 1024, tmp_mb: int | None = 256) -> None:
        self.work_root = str(work_root) if work_root is not None else None
        self.time_limit_s = float(time_limit_s)
        self.memory_mb = int(memory_mb)
        wall_s = self.time_limit_s + float(slack_s)
        # RLIMIT_CPU counts all threads of a process: a library with a thread per core (torch,
        # tensorflow) may use cores x wall seconds legitimately; the wall limit is the guard
        cpu_s = int(wall_s * (os.cpu_count() or 1)) + 10
        self.limits = Limits(wall_s=wall_s, cpu_s=cpu_s, memory_mb=self.memory_mb,
                             nproc=nproc, file_mb=file_mb, output_bytes=400_000, tmp_mb=tmp_mb,
                             sandbox_memory_mb=sandbox_memory_mb, disk_mb=disk_mb)
        base = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
        self.fonts = FontCache(base / "bigcodebench" / _mpl_tag())
        self.caps = caps_report(self.limits)
        capped = "memory" in self.caps["enforced"]
        each = sandbox_memory_mb if capped and sandbox_memory_mb else self.memory_mb + self.limits.tmpfs_mb()
        # raises SandboxFitError when not one sandbox fits
        self.plan = plan_parallel(max_parallel or os.cpu_count() or 1, memory_mb_each=int(each),
                                  disk_mb_each=SEED_MB if disk_mb is not None else int(file_mb),
                                  disk_path=self.work_root or tempfile.gettempdir(),
                                  memory_capped=capped, what="BigCodeBench sandboxes",
                                  files_each=(self.limits.nproc or 1) * (self.limits.nofile or 0) or None,
                                  tcp_mb_each=self.caps["tcp_mb_outside_memory"])
        self.parallel = self.plan.granted
        self._slots = threading.BoundedSemaphore(self.parallel)
        log_sandbox_facts(log, "BigCodeBench sandbox", self.caps, self.plan)

    def facts(self) -> dict:
        """What the run card records about the sandboxes: mode, caps (enforced and missing),
        per-process limits, masked kernel interfaces, the parallelism and why."""
        return {"mode": "host-root (bubblewrap; allow-list of the host, read-only)", **self.caps,
                "parallel": self.plan.facts()}

    def _env(self, work: Path) -> dict[str, str]:
        # multiprocessing (the checker's Manager) puts unix sockets under TMPDIR, and their
        # paths may not exceed 107 bytes: a deep work folder falls back to the private /tmp
        tmp = work / "tmp" if len(str(work)) <= MAX_TMPDIR_CHARS else Path("/tmp")
        env = {"HOME": str(work), "TMPDIR": str(tmp), "MPLCONFIGDIR": str(work / ".mpl"),
               "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "NUMEXPR_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        for key in PASS_THROUGH:
            if os.environ.get(key):
                env[key] = os.environ[key]
        return env

    def _prepare(self, work: Path) -> None:
        (work / "tmp").mkdir()
        (work / ".mpl").mkdir()
        for f in self.fonts.files():
            shutil.copy2(f, work / ".mpl" / f.name)
        shutil.copy2(RUNNER, work / RUNNER.name)

    def run(self, argv: list[str], stdin: bytes | None = None,
            result_channel: int | None = None) -> SandboxResult:
        """One sandboxed run as a check makes it (a slot, a fresh seeded work folder, this
        executor's caps and environment): `argv` starts in the work folder."""
        with self._slots:
            work = Path(tempfile.mkdtemp(prefix="memrl-bcb-", dir=self.work_root))
            try:
                self._prepare(work)
                return run_isolated(argv, workdir=work, limits=self.limits, env=self._env(work),
                                    ro_binds=_data_binds(), stdin=stdin, result_channel=result_channel)
            finally:
                shutil.rmtree(work, ignore_errors=True)

    def check(self, code: str, test: str, entry_point: str, modules: Iterable[str] = ()) -> CheckResult:
        """Run `test` against `code` (one program, as bigcodebench does). Raises
        `memrl_envs.sandbox.SandboxError` only if no sandbox can be created here."""
        request = {"code": code, "test": test, "entry_point": entry_point,
                   "time_limit_s": self.time_limit_s, "max_as_mb": self.memory_mb,
                   "max_data_mb": self.memory_mb, "max_stack_mb": STACK_MB,
                   "modules": list(modules)}
        run = self.run([sys.executable, "-I", RUNNER.name], stdin=json.dumps(request).encode(),
                       result_channel=CHANNEL_BYTES)
        return parse_channel(run)


def parse_channel(run: SandboxResult) -> CheckResult:
    """The runner's result, read from its own channel (never from what the program printed)."""
    common = dict(sandbox_timed_out=run.timed_out, returncode=run.returncode,
                  stderr_tail=run.stderr.strip()[-1500:], wall_s=round(run.wall_s, 3), oom_kills=run.oom_kills)
    flags = [f"the program's output contains the checker's framing ({FRAME.strip()})"
             for text in (run.stdout, run.stderr) if FRAME in text][:1]
    channel = run.channel or b""
    ready = channel.startswith(READY)
    body = channel[len(READY):] if ready else channel
    payload = None
    if body:
        try:
            payload = json.loads(body.decode("utf-8", errors="replace"))
        except ValueError:
            flags.append("the result channel held no readable result")
    if not isinstance(payload, dict) or not isinstance(payload.get("status"), str):
        # the reporter died: after the checker was ready, the code under test killed it
        return CheckResult(status="no_result", ready=ready, tampered="; ".join(flags), **common)
    if payload.get("tampered"):
        flags.insert(0, str(payload["tampered"]))
    if run.returncode != 0:  # the reporter exits 0 once it has written its result
        flags.append(f"the host saw the sandbox end with status {run.returncode} after a complete result")

    def strings(key: str) -> dict[str, str]:
        value = payload.get(key)
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    def number(key: str, kind: type) -> int | float | None:
        value = payload.get(key)
        return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return CheckResult(status=payload["status"], ready=bool(payload.get("ready")),
                       details=strings("details"), unimportable=strings("unimportable"),
                       error=str(payload.get("error", "")), tampered="; ".join(flags),
                       test_process=str(payload.get("test_process") or ""),
                       test_exitcode=number("test_exitcode", int), test_seconds=number("test_seconds", float),
                       **common)


def _data_binds() -> list[str]:
    return [os.environ[k] for k in PATH_VARS if os.environ.get(k) and os.path.isdir(os.environ[k])]


def _default_cache_dir() -> Path:
    from memrl.core.cachedir import default_cache_dir

    return Path(default_cache_dir())


def _mpl_tag() -> str:
    try:
        from importlib.metadata import version

        return f"mplconfig-{version('matplotlib')}"
    except Exception:  # matplotlib missing: the sandbox will say so
        return "mplconfig"
