"""`memrl check <the same overrides as a run>`: only the run's preflight (memrl.control.preflight).

It composes and validates the config as `memrl run` would, builds the env, the memory
module (its bank in a temporary folder), the models and the embedder, checks every key,
then sends one call per purpose the run will make (the env's action, the memory writer, the
judge, a baseline's own calls, one embedding), each with its real budget and settings, past
the response cache, and prints a table: per purpose the model, the budget sent (answer +
reasoning headroom), the reasoning tokens spent, the finish reason and the price of the
call. Nothing is written to any run directory. The calls are paid (a few cents at most).

Exit status: 0 every call answered within its budget; 2 a configuration problem, a missing
key, or a call that failed, came back empty or was cut at its budget (the table says which
and what to raise).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from memrl.core.errors import ConfigError
from memrl.llm.base import MissingKeyError


def check(overrides: Sequence[str]) -> tuple[Any, str]:
    """(the Preflight, a description of the models) for a run's overrides."""
    from memrl.config.validate import validate
    from memrl.control.plan import compose
    from memrl.control.preflight import check_keys, preflight, run_clients
    from memrl.control.wiring import wire

    v = validate(compose(list(overrides)))
    with tempfile.TemporaryDirectory(prefix="memrl-check-") as tmp:
        try:
            objs = wire(v, Path(tmp))
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        try:
            clients = run_clients(objs.llm, [objs.env])
            check_keys(clients, objs.embedder)
            try:
                tasks = objs.env.tasks()
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
            if not tasks:
                raise ConfigError("env: the selection holds no task")
            episode = objs.llm.episode("preflight", None) if objs.llm is not None else None
            probes = [*objs.env.model_probes(tasks[0], episode), *objs.memory.model_probes(tasks[0])]
            result = preflight(clients, probes, objs.embedder, refuse=False)
            models = "\n".join(f"  {role}: {json.dumps(c.profile.describe())}" for role, c in clients.items())
        finally:
            objs.env.close()
            objs.memory.close()
    return result, models


def main(argv: Sequence[str] | None = None, prog: str = "memrl check") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 epilog="Any other argument is a Hydra override of the run.")
    ap.add_argument("--json", action="store_true", help="print the table's rows as JSON")
    args, overrides = ap.parse_known_args(argv)
    from memrl.control.preflight import table

    try:
        result, models = check(overrides)
    except (ConfigError, MissingKeyError) as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.rows(), indent=2))
    else:
        print("models:\n" + models)
        print(table(result))
        total = sum(r.cost_usd for r in result.results)
        unpriced = [r.model for r in result.results if not r.priced]
        print(f"preflight cost: ${total:.6f}" + (f" (+ unpriced: {', '.join(sorted(set(unpriced)))})"
                                                 if unpriced else ""))
    bad = [r for r in result.results if r.problem]
    if bad:
        print(f"memrl: {len(bad)} of the {len(result.results)} calls would stop the run (see "
              "'problem')", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m memrl.cli check"))
