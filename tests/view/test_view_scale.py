"""The page at paper scale (memrl/view/tasks.py): past INLINE_BYTES the task panel's data goes to a
folder beside the page, one script per group of tasks, loaded when a task is chosen (checked in
a real browser from disk); the Q distribution draws at most BOX_POINTS values per run and epoch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from coin_runner import finish

import memrl.view.tasks as tasks
from memrl.core.rundir import RunDir
from memrl.testing import browser
from memrl.view import write_page
from memrl.view.data import RunView
from memrl.view.page import order_statistics


def a_run(path: Path) -> RunDir:
    finish(path, epochs=2)
    rd = RunDir(path)
    rd.card.write_text(json.dumps({"config": {"env": {"name": "coin"}, "memory": {"name": "memrl"}, "seed": 7},
                                   "model": "hash", "status": "finished"}))
    return rd


def shards(folder: Path) -> dict[str, dict]:
    out = {}
    for p in sorted(folder.glob("task-*.js")):
        text = p.read_text()
        assert text.startswith("memrlTaskShard(") and text.endswith(");\n")
        key, _, blob = text[len("memrlTaskShard("):-3].partition(",")
        out[json.loads(key)] = json.loads(blob)
    return out


def test_a_large_task_panel_goes_beside_the_page_and_back(tmp_path, monkeypatch):
    rd = a_run(tmp_path / "run")
    monkeypatch.setattr(tasks, "INLINE_BYTES", 0)
    monkeypatch.setattr(tasks, "SHARD_TASKS", 2)
    page = write_page([rd.root], tmp_path / "page.html")
    html = page.read_text()
    folder = tmp_path / "page_files"
    assert 'id="task-shard-' not in html and "page_files/" in html
    got = shards(folder)
    assert sorted(got) == ["0-0", "0-1", "0-2"]  # 5 tasks, 2 a shard
    view = RunView.load(rd.root)
    want = view.task_memories()
    side = {t: ms for shard in got.values() for t, ms in shard.items()}
    assert {t: [(m["id"], m["experience"]) for m in ms] for t, ms in side.items()} == \
        {t: [(m["id"], m["experience"]) for m in ms] for t, ms in want.items()}
    assert all(m["experience"] for ms in side.values() for m in ms)
    # small again: inline, and the folder of the larger page is gone
    monkeypatch.setattr(tasks, "INLINE_BYTES", 4_000_000)
    html = write_page([rd.root], tmp_path / "page.html").read_text()
    assert 'id="task-shard-0-0"' in html and not folder.exists()


def test_order_statistics_keep_the_extremes_and_the_spread():
    values = [float(i) for i in range(10_001)]
    kept = order_statistics(values[::-1], 101)
    assert len(kept) == 101 and kept[0] == 0.0 and kept[-1] == 10_000.0 and kept[50] == 5000.0
    assert order_statistics([3.0, 1.0, 2.0], 101) == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_a_page_with_its_panel_beside_it_opens_from_disk(tmp_path, monkeypatch):
    why = browser.missing()
    if why:
        pytest.skip(why)
    rd = a_run(tmp_path / "run")
    monkeypatch.setattr(tasks, "INLINE_BYTES", 0)
    page = write_page([rd.root], tmp_path / "page.html")
    seen: dict = {"errors": [], "requests": []}
    with browser.headless_browser() as b:
        tab = b.new_page()
        tab.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: seen["errors"].append(str(e)))
        tab.on("request", lambda r: seen["requests"].append(r.url))
        tab.goto(page.resolve().as_uri())
        tab.wait_for_selector("#task-table tr.memrow", timeout=30_000)
        rows = tab.locator("#task-table tr.memrow").count()
        tab.select_option("#task-select", index=3)
        tab.wait_for_selector("#task-table tr.memrow", timeout=30_000)
        assert tab.locator("#task-table pre").first.text_content()
    assert rows == 2 and seen["errors"] == []
    assert any(u.endswith(".js") and "page_files" in u for u in seen["requests"])
    assert all(u.startswith("file://") for u in seen["requests"])
    # without its folder the page says where the memories are
    (tmp_path / "page_files").rename(tmp_path / "elsewhere")
    with browser.headless_browser() as b:
        tab = b.new_page()
        tab.goto(page.resolve().as_uri())
        tab.wait_for_function("document.getElementById('task-table').textContent.includes('not beside')",
                              timeout=30_000)
