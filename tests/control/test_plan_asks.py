"""`memrl plan` asks before it spends (issue 30, finding 7): a paid pilot is quoted, then asked
about (a flag answers; a caller that cannot be asked is refused, nothing spent); what the
pilot cost is printed after it; the plan says what it does while it works; its wall time names
the latency it assumed and how to set it. On the tiny benchmark with a scripted model given
prices (a paid model as the plan sees it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tiny_runs import FIXTURES, environ

from memrl.config.validate import validate
from memrl.control.pilot_quote import quote
from memrl.control.plan import compose

PAID = ["env=tiny", "memory=memrl", "embedder=hashing", "llm=scripted", "env.retrieval.delta=0.0",
        f"hydra.searchpath=[file://{FIXTURES}]", "runner.epochs=3", "llm.price_per_mtok_in=2.5",
        "llm.price_per_mtok_out=10"]


def plan(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memrl.cli", "plan", *args], cwd=tmp, env=environ(tmp),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def test_a_paid_pilot_is_quoted_and_not_run_without_a_yes(tmp_path):
    """Finding 7: without --from the plan ran a paid pilot with no confirmation."""
    p = plan(PAID, tmp_path)
    assert p.returncode == 1, p.stderr
    assert "plan: the pilot plays 4 tasks x up to 2 epochs on scripted-a: at most 16 model calls" in p.stderr
    assert "about $" in p.stderr and "not run without a question" in p.stderr and "--yes" in p.stderr
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing spent


def test_with_yes_it_says_what_it_does_what_the_pilot_cost_and_the_latency_it_assumed(tmp_path):
    p = plan([*PAID, "--yes", "--pilot-tasks", "2"], tmp_path)
    assert p.returncode == 0, p.stderr
    err = p.stderr
    assert "plan: listing the tasks of tiny" in err and "plan: 4 tasks (" in err
    assert "plan: running 1 paid pilot(s), about $" in err
    assert "plan:   pilot: epoch 1/1: SR" in err  # the pilot's progress as it runs
    card = json.loads(next((tmp_path / "runs" / ".plan").rglob("run_card.json")).read_text())
    calls = card["llm_totals"]["calls"]
    assert f"plan: the pilot made {calls} model calls (0 answered from the response cache, free)" in err
    assert "assuming " in p.stdout and "s per model call (the median uncached call of a pilot of 2 tasks" in p.stdout
    assert "--call-seconds S sets it" in p.stdout
    q = plan([*PAID, "--yes", "--pilot-tasks", "2", "--call-seconds", "1.5"], tmp_path)
    assert "assuming 1.50 s per model call (--call-seconds;" in q.stdout


def test_the_quote_bounds_the_pilot(tmp_path):
    """The quote is an upper range: at least the calls and tokens the pilot then made."""
    v = validate(compose(PAID))
    q = quote(v, 2, 1)
    assert q.bills and q.cost_usd is not None and q.cost_usd > 0
    p = plan([*PAID, "--yes", "--pilot-tasks", "2"], tmp_path)
    assert p.returncode == 0, p.stderr
    card = json.loads(next((tmp_path / "runs" / ".plan").rglob("run_card.json")).read_text())
    t = card["llm_totals"]
    assert q.calls >= t["calls"] and q.prompt_tokens >= t["prompt_tokens"]
    assert q.completion_tokens >= t["completion_tokens"]


def test_a_model_that_runs_here_is_not_asked_about(tmp_path):
    free = [o for o in PAID if "price" not in o]
    q = quote(validate(compose(free)), 2, 2)
    assert not q.bills and "no charge" in q.line()
    p = plan([*free, "--pilot-tasks", "2"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "runs here: no charge" in p.stderr and "not run without a question" not in p.stderr
