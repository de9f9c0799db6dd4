"""The MemRL page (`memrl view`): one self-contained HTML file, checked in a real browser
(Debian's chromium, driven headless by playwright) on a real small sweep: every chart
renders, nothing is fetched from the network, no console error, the methods are overlaid, the
task panel lists a task's memories; a screenshot is kept as the test's artifact (its path is
printed; set MEMRL_TEST_ARTIFACTS=DIR to keep a copy there)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from coin_runner import finish

from memrl.cli import main as memrl_main
from memrl.core.rundir import RunDir
from memrl.testing import browser
from memrl.view import write_page
from memrl.view.page import SECTIONS


def open_page(path: Path, screenshot: Path) -> dict:
    """Load the page in headless chromium; what the checks need, and a full-page screenshot."""
    why = browser.missing()
    if why:
        pytest.skip(why)
    seen: dict = {"errors": [], "requests": []}
    with browser.headless_browser() as b:
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: seen["errors"].append(str(e)))
        page.on("request", lambda r: seen["requests"].append(r.url))
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("#curves .main-svg", timeout=30_000)
        seen["sections"] = [s for s in SECTIONS if page.locator(f"section#{s}").count() == 1]
        divs = page.locator("div.plotly-graph-div")
        seen["plots"] = divs.count()
        seen["rendered"] = sum(divs.nth(i).locator(".main-svg").count() > 0
                               for i in range(divs.count()))
        seen["legend"] = page.locator("#curves .legendtext").all_text_contents()
        seen["traces"] = page.evaluate(
            "() => [...document.querySelectorAll('div.plotly-graph-div')]"
            ".map(d => [d.id, (d.data || []).length])")
        seen["runs"] = page.locator("#task-run option").all_text_contents()
        memrl = next(i for i, t in enumerate(seen["runs"]) if t.startswith("memrl"))
        page.select_option("#task-run", str(memrl))
        seen["memory_rows"] = page.locator("#task-table tr.memrow").count()
        seen["effects"] = page.locator("#task-table .helped, #task-table .hurt").count()
        page.screenshot(path=str(screenshot), full_page=True)
    return seen


def keep(screenshot: Path) -> None:
    print(f"\nscreenshot: {screenshot}")
    dest = os.environ.get("MEMRL_TEST_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(dest) / screenshot.name)


@pytest.mark.slow
def test_page_renders_a_sweep_in_a_browser(alfworld_sweep, tmp_path):
    out = tmp_path / "sweep.html"
    assert memrl_main(["view", str(alfworld_sweep["sweep"]), "--out", str(out)]) == 0
    html = out.read_text()
    assert "<script src=" not in html and 'rel="stylesheet"' not in html  # everything inline
    shot = tmp_path / "memrl_view.png"
    seen = open_page(out, shot)
    keep(shot)
    assert seen["errors"] == []
    assert all(u.startswith("file://") for u in seen["requests"]), seen["requests"]
    assert seen["sections"] == list(SECTIONS)
    assert seen["plots"] >= 7 and seen["rendered"] == seen["plots"]
    assert {"memrl", "none"} <= set(seen["legend"])  # the methods overlaid on one chart
    traces = dict(seen["traces"])
    assert traces["curves-plot"] == 2 * 3  # two runs × (SR, CSR, forgetting)
    assert traces["grid-0"] == 1 and traces["grid-1"] == 1
    assert traces["q-calibration-plot"] >= 1 and traces["q-distribution-plot"] >= 1
    assert len(seen["runs"]) == 2
    assert seen["memory_rows"] == 2  # the task's memories of epochs 1 and 2
    assert seen["effects"] >= 1  # epoch 1's memory was injected into epoch 2's episode
    assert shot.stat().st_size > 50_000


def test_page_of_a_run_without_bank_log_says_so(tmp_path):
    """A run from before bank_updates.jsonl: the page still builds, without bank panels,
    and says why (no browser needed)."""
    finish(tmp_path / "old", epochs=2)
    rd = RunDir(tmp_path / "old")
    rd.card.write_text(json.dumps({"config": {"env": {"name": "coin"}, "memory": {"name": "memrl"},
                                              "seed": 7}, "model": "hash", "status": "finished"}))
    rd.bank_updates.unlink()
    rd.memories.unlink()
    path = write_page([rd.root])
    assert path == rd.view
    html = path.read_text()
    assert "predates bank_updates.jsonl" in html and 'id="grid-0"' in html
    assert 'id="q-distribution-plot"' not in html and "no bank Q recorded" in html
    # the summary's utility reading: the AUC of the Q a memory had before an episode for its outcome
    from memrl.metrics.utility import q_prospective
    from memrl.view.data import RunView

    qp = q_prospective(RunView.load(rd.root).records)
    assert "Q before → outcome, AUC" in html and "Q–success r" not in html
    if qp["auc"] is not None:
        assert f"{qp['auc']:.3f}" in html and f"({qp['injections']} injections)" in html
    else:
        assert f"– ({qp['injections']} injections)" in html
    assert memrl_main(["view", str(tmp_path / "nothing-here")]) == 2


def test_a_parameter_sweep_gets_one_series_per_setting(tmp_path):
    """Runs of one method that differ by a swept key (λ) and by seed: one colour / marker /
    dash per λ, seeds of a λ share them, and the legend names λ and the seed."""
    from memrl.journal.banklog import BankHistory
    from memrl.view.data import RunView
    from memrl.view.page import _styles

    def run(lam: float, seed: int) -> RunView:
        config = {"env": {"name": "coin"}, "memory": {"name": "memrl", "lam": lam, "alpha": 0.3},
                  "runner": {"progress": seed == 0}, "seed": seed}
        ident = {"env": "coin", "method": "memrl", "model": "hash", "seed": str(seed)}
        return RunView(rd=RunDir(tmp_path / f"{lam}-{seed}"), ident=ident, status="finished",
                       records=[], history=BankHistory(), texts={}, config=config)

    styles = _styles([run(0.0, 0), run(0.0, 1), run(1.0, 0)])
    assert [s["name"] for s in styles] == ["memrl (lam=0.0) seed 0", "memrl (lam=0.0) seed 1",
                                           "memrl (lam=1.0) seed 0"]
    look = [(s["color"], s["symbol"], s["dash"]) for s in styles]
    assert look[0] == look[1] != look[2] and styles[0]["width"] > styles[1]["width"]
