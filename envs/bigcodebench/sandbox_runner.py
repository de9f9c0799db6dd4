"""Runs INSIDE the sandbox (copied into its work folder, started by the host's interpreter):
bigcodebench's own checker on one solution, then one result line on stdout.

Input (stdin, JSON): code, test, entry_point, time_limit_s, max_as_mb, max_data_mb,
max_stack_mb, modules (the task's libraries), marker (a per-run nonce).
Output: `<marker>ready` once bigcodebench is imported, then `<marker>{json}` with
status (pass | fail | timeout | harness_error), details (test name -> trace, cut to size) and,
when the check did not pass, `unimportable` (task libraries that fail to import here).

Only the standard library and bigcodebench are used, so this file must stay self-contained.
"""

import importlib
import json
import os
import sys

MAX_TRACE = 4000


def _emit(marker, payload):
    sys.stdout.write(marker + (payload if isinstance(payload, str) else json.dumps(payload)) + "\n")
    sys.stdout.flush()


def _unimportable(modules):
    """Modules of the task that cannot be imported in this interpreter, with the reason."""
    out = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - any failure to import counts
            out[name] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def main():
    req = json.loads(sys.stdin.read())
    marker = req["marker"]
    try:
        import bigcodebench.eval as checker
    except BaseException as exc:  # noqa: BLE001
        _emit(marker, {"status": "harness_error",
                       "error": f"cannot import bigcodebench.eval: {type(exc).__name__}: {exc}"})
        return
    # bigcodebench reads its per-task limit from an env var that crashes when set (str vs
    # float); the module attribute is the reliable knob. min/gt limits of 1 s make the
    # effective limit max(TIMEOUT_LIMIT, 1) + 1, as in the benchmark with its default 240 s.
    os.environ.pop("BIGCODEBENCH_TIMEOUT_PER_TASK", None)
    checker.TIMEOUT_LIMIT = float(req["time_limit_s"])
    _emit(marker, "ready")
    status, details = checker.untrusted_check(
        req["code"], req["test"], req["entry_point"],
        req["max_as_mb"], req["max_data_mb"], req["max_stack_mb"],
        min_time_limit=1, gt_time_limit=1)
    result = {"status": status,
              "details": {str(k): str(v)[-MAX_TRACE:] for k, v in dict(details).items()}}
    if status != "pass":
        result["unimportable"] = _unimportable(req.get("modules", []))
    _emit(marker, result)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # the checker's Manager processes may still be alive; the sandbox ends them all
    os._exit(0)
