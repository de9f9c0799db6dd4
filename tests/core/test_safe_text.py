"""Text that can always be written (memrl.core.safe_text): a lone surrogate, NUL, a terminal escape
or undecodable bytes from a model or a sandbox never kill a run (before: the journal's write
raised UnicodeEncodeError, the run ended failed with 0 records, and every resume replayed
the same episode into the same error)."""

from __future__ import annotations

import json
import logging

import pytest
from tiny_runs import card, memrl_run

from memrl.control.runlog import RunLogHandler
from memrl.core.records import EpisodeResult, Step, read_episodes
from memrl.core.rundir import RunDir
from memrl.core.safe_text import safe, safe_bytes, safe_str


@pytest.mark.parametrize("raw, shown", [
    ("plain text, ünïcödé and 漢字", "plain text, ünïcödé and 漢字"),  # safe text reads the same
    ("tab\tnewline\ncarriage\r", "tab\tnewline\ncarriage\r"),
    ("lone \udcff surrogate", "lone \\udcff surrogate"),
    ("\x1b[2Jcleared", "\\x1b[2Jcleared"),
    ("nul\x00del\x7f", "nul\\x00del\\x7f"),
])
def test_unsafe_characters_become_their_escapes(raw, shown):
    assert safe_str(raw) == shown
    safe_str(raw).encode("utf-8")  # always encodes


def test_bytes_and_nested_records_are_made_safe_as_copies():
    assert safe_bytes(b"ok \xff\xfe") == "ok \\xff\\xfe"
    result = EpisodeResult(success=False, reward=0.0, steps=1, transcript=[Step("go \udcff", "\x1b[31mred")],
                           errors=["crash: \ud800"], info={"raw": b"\xff", "nested": {"k\udc80": ("\x00",)}})
    clean = safe(result)
    assert clean is not result and result.transcript[0].action == "go \udcff"  # the original is left alone
    assert clean.transcript == [Step("go \\udcff", "\\x1b[31mred")] and clean.errors == ["crash: \\ud800"]
    assert clean.info == {"raw": "\\xff", "nested": {"k\\udc80": ("\\x00",)}}
    json.dumps(safe(result.__dict__ | {"transcript": [s.__dict__ for s in clean.transcript]}),
               ensure_ascii=False).encode("utf-8")


def test_the_run_log_writes_a_line_whatever_it_holds(tmp_path):
    handler = RunLogHandler(str(tmp_path / "run.log"), encoding="utf-8")
    logger = logging.getLogger("memrl.test_safe_text")
    logger.addHandler(handler)
    logger.propagate = False  # pytest's own log capture is not under test (and xdist cannot send a lone surrogate)
    try:
        try:
            raise ValueError("bad \udcff name")
        except ValueError:
            logger.exception("episode %s crashed: \x1b[2J", "t0\udc80")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        handler.close()
    text = (tmp_path / "run.log").read_text(encoding="utf-8")
    assert "t0\\udc80 crashed: \\x1b[2J" in text and "bad \\udcff name" in text and "\x1b" not in text


def test_a_run_whose_model_and_env_bring_back_unwritable_text_finishes_and_records_it(tmp_path):
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "llm.script=tiny_env:hostile_reply", "env.hostile=true", "env.n_tasks=3",
            "runner.epochs=2", "runner.batch_size=3", f"hydra.run.dir={run_dir}"]
    first = memrl_run(args, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert card(run_dir)["status"] == "finished"
    records = read_episodes(RunDir(run_dir).episodes)
    assert len(records) == 6 and not [r for r in records if r.errors]
    step = records[0].transcript[0]
    assert step["action"].endswith(" \\udcff\\x00\\x1b[1m")  # the model's reply, escaped, as played
    assert step["observation"].endswith(" \\udcff\\x1b[2J\\x00")
    assert records[0].info["raw"] == "\\xff\\xfe" and records[0].info["message"] == "\\ud800 lone"
    assert "\x1b" not in (RunDir(run_dir).root / "run.log").read_text(encoding="utf-8")
    # the memories written from those episodes are in the bank, escaped, and retrieved
    assert any(r.injected for r in records if r.epoch == 2)
    again = memrl_run(args, tmp_path)  # a finished run: the same command only re-writes the metrics
    assert again.returncode == 0 and len(read_episodes(RunDir(run_dir).episodes)) == 6
