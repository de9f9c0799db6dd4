"""The demo's effect, end to end on real ALFWorld games with the real embedded model at
temperature 0 (`python -m memrl.cli demo`, the flow behind `make demo`): ALFWorld's expert plays
the games twice, stopped after 3 steps (a failed attempt) and whole, and the two become a
history bank (each game's failed attempt the older of its two memories, both at similarity 1);
the embedded model then plays the games with MemRL and RAG, each writing every episode, and
with no memory.

The games (valid_seen) are chosen for a robust margin: three short games whose expert
trajectories (4-5 steps) the model copies step for step when given them, so with the expert's
memory it solves them and without memory it solves none; and two it cannot solve by copying
within the 8-step cap: one the expert itself failed (50 steps) and one the expert needed 41
steps for. The assertions are the mechanism under oldest-first ties with each attempt older (the
earlier designs' setting, docs/experiments.md "Why the tie rule matters"), counted: similarity
shows every game its failed attempt in every epoch; once a memory has failed, MemRL never
injects it again and RAG always does; and MemRL then solves more games than RAG.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memrl.core.rundir import RunDir
from data_paths import ALFWORLD


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}"),
]

COPYABLE = [  # expert solves in 5, 5, 4 steps
    "look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
    "look_at_obj_in_light-Laptop-None-DeskLamp-328/trial_T20190908_201550_622420",
    "look_at_obj_in_light-Statue-None-DeskLamp-216/trial_T20190909_193045_208933",
]
NOT_COPYABLE = [  # expert fails (50 steps); expert needs 41 steps
    "look_at_obj_in_light-Bowl-None-DeskLamp-301/trial_T20190909_150719_492274",
    "look_at_obj_in_light-Vase-None-DeskLamp-303/trial_T20190907_150418_457594",
]
GAMES = COPYABLE + NOT_COPYABLE


def test_memrl_stops_injecting_a_memory_that_failed_where_rag_keeps_it_and_solves_more(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(tmp_path / "cache"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    # oldest-first ties with the attempt older: the mechanism under a rule that shows RAG the attempt
    cmd = [sys.executable, "-m", "memrl.cli", "demo", "--out", str(out), "--bench-prompts", "0", "--ties", "oldest",
           "env.max_tasks=null", f"env.task_ids=[{','.join(GAMES)}]", "env.max_steps=8",
           "runner.epochs=3", "runner.progress=false"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads((out / "demo.json").read_text())
    assert sorted(res["games"]) == sorted(GAMES) and res["teacher"]["solved"] == 4  # the expert fails Bowl-301
    assert res["teacher"]["attempts_solved"] == 0 and res["teacher"]["attempt_first"] == len(GAMES)
    assert len(RunDir(out / "teacher" / "expert").episodes.read_text().splitlines()) == len(GAMES)

    records = {m: [json.loads(x) for x in RunDir(out / m).episodes.read_text().splitlines()]
               for m in ("rag", "memrl")}
    shown = {m: {(r["epoch"], r["task_id"]): [i["id"] for i in r["injected"]] for r in rs}
             for m, rs in records.items()}
    # similarity cannot tell a game's attempt from its solved episode: RAG shows the (older)
    # failed attempt to every game in every epoch; MemRL's first epoch is the same
    for e in (1, 2, 3):
        assert all(shown["rag"][(e, g)] == [f"init:attempt:e001:{g}"] for g in GAMES), shown["rag"]
    assert all(shown["memrl"][(1, g)] == [f"init:attempt:e001:{g}"] for g in GAMES), shown["memrl"]
    # once a memory failed, MemRL never injects it again; RAG injects it every time
    mech = res["mechanism"]
    assert mech["rag"]["reinjected_after_failure"] == mech["rag"]["injections_epoch2_on"] == 2 * len(GAMES)
    assert mech["memrl"]["injections_epoch2_on"] == 2 * len(GAMES)
    assert mech["memrl"]["reinjected_after_failure"] == 0, mech
    # ... and shows the copyable games the expert's memory in epoch 2
    assert all(shown["memrl"][(2, g)] == [f"init:expert:e001:{g}"] for g in COPYABLE), shown["memrl"]

    solved = {m: [round(x * len(GAMES)) for x in sr] for m, sr in res["sr"].items()}
    assert solved["rag"] == [0, 0, 0] and solved["none"] == [0, 0, 0], solved
    assert solved["memrl"][0] == 0 and solved["memrl"][-1] >= solved["rag"][-1] + 2, solved  # a margin of 2 games
    across = res["across_epochs"]
    assert across["final"]["a_only"] >= 2 and across["final"]["b_only"] == 0, across
    # copying is what the memory does: given the game's expert memory, most steps are the expert's
    with_expert = res["copy_accuracy"]["memrl"]["2"]["with_teacher"]
    assert with_expert["episodes"] >= len(COPYABLE) and with_expert["accuracy"] > 0.5
    # MemRL's Q: the attempts it failed with fell below 0, the expert memories it solved with rose
    q = {(m["label"], m["task_id"]): m for m in res["teacher_memories"]}
    assert all(q[("attempt", g)]["q"] < 0 for g in GAMES)
    assert all(q[("expert", g)]["q"] > 0 for g in COPYABLE if q[("expert", g)]["used_solved"]), q
    # the printed conclusion is this run's own: its condition, its test, its power, and under this
    # rule that the result is the tie rule's doing
    assert res["condition"] == {"split": "valid_seen", "ties": "oldest", "order": "history", "k2": 1, "epochs": 3}
    assert 0.0 <= res["power"]["predicted"]["power"] <= 1.0
    md = (out / "demo.md").read_text()
    assert md.index("## What this demo shows") < md.index("## Success rate per epoch")
    assert "the tie rule alone decides which of a game's two memories RAG shows" in md
    p = across["final"]["mcnemar_p"]
    assert ("**a significant difference**" in md) == (p < 0.05) and f"p = {p:.3g}" in md
