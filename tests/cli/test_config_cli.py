"""`memrl config`: the full validated config before a run, every key with its value, its
default where it differs and its meaning; a mistyped key gets the closest one; a group option
that does not exist is `memrl: ...`, exit 2, with the group's options (issue 30, finding 9)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from data_paths import ALFWORLD
from memrl.cli import main as memrl_main

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "configs"
TINY = ["env=tiny", "embedder=hashing", f"hydra.searchpath=[file://{FIXTURES}]"]


def key_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if re.match(r"^\s*[a-z_0-9]+:", x)]


def test_the_keys_their_defaults_and_meanings_before_a_run(capsys, monkeypatch):
    """Finding 9: `memrl run --cfg job` showed `runner: {}` and no memory.lam or alpha."""
    if not ALFWORLD.is_dir():
        pytest.skip(f"ALFWorld data not at {ALFWORLD}")
    monkeypatch.setenv("ALFWORLD_DATA", str(ALFWORLD))
    assert memrl_main(["config", "memory.alpha=0.1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  lam: 0.5 +# λ: weight of Q in the Phase-B score$", out, re.M)
    assert re.search(r"^  alpha: 0.1 +# default 0.3; utility learning rate α$", out, re.M)
    assert re.search(r"^  epochs: 10 +# extent: a run may be extended; passes over the task set", out, re.M)
    assert re.search(r"^  batch_size: 1 +# B=1 is strictly online", out, re.M)
    assert re.search(r"^  timeout: .*no effect on results", out, re.M)
    assert re.search(r"^seed: 0 +# what a seed changes here: nothing$", out, re.M)
    # the default run (ALFWorld, MemRL, the embedded model): every key says what it means
    lines = key_lines(out)
    assert len(lines) > 120
    bare = [x for x in lines if "#" not in x or not x.split("#", 1)[1].strip()]
    assert bare == []


def test_a_mistyped_key_gets_the_closest_one(capsys):
    assert memrl_main(["config", *TINY, "memory.lambda=0.3", "runner.epoch=3", "memory.writer.layot=x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memrl: invalid configuration:")
    assert "memory.lambda: not a key of memory; did you mean memory.lam?" in err
    assert "runner.epoch: not a key of runner; did you mean runner.epochs?" in err
    assert "memory.writer.layot: not a key of memory; did you mean memory.writer.layout?" in err


def test_a_config_of_the_tiny_benchmark_prints_every_section(capsys):
    assert memrl_main(["config", *TINY, "llm=scripted", "llm.temperature=0.7"]) == 0
    out = capsys.readouterr().out
    for section in ("env", "memory", "llm", "embedder", "agent", "runner", "logger", "metrics", "paths"):
        assert re.search(rf"^{section}:", out, re.M), section
    assert "what a seed changes here: the model's samples (llm.temperature=0.7)" in out
    assert memrl_main(["config", *TINY, "memory=none,rag"]) == 2
    assert "one run" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "config", "plan"])
def test_a_wrong_group_option_is_memrls_exit_2_with_the_options(command):
    p = subprocess.run([sys.executable, "-m", "memrl.cli", command, "env=alfwrld", "memory=memrl,ragg"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 2, p.stderr
    assert "memrl: invalid configuration:" in p.stderr
    assert ("env=alfwrld: no such option of the config group env (its options: alfworld, bigcodebench, hle, "
            "lifelong_db, lifelong_os); did you mean env=alfworld?") in p.stderr
    assert "memory=ragg: no such option" in p.stderr and "did you mean memory=rag?" in p.stderr
    assert "Traceback" not in p.stderr and "HYDRA_FULL_ERROR" not in p.stderr


def test_a_group_of_a_search_path_is_known():
    from memrl.config.groups import check_group_choices

    check_group_choices(["env=tiny", f"hydra.searchpath=[file://{FIXTURES}]", "experiment=null", "+sweep=lambda"])
