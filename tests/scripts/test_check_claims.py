"""The claims check (scripts/check_claims.py): blocks re-rendered from results/, statistics typed
by hand refused, run cards required clean; and the repository's own docs pass it."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
cc = importlib.import_module("check_claims")
cr = importlib.import_module("claims_renderers")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A repository with one results file and a renderer of it."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "results" / "x").mkdir(parents=True)
    (tmp_path / "results" / "x" / "r.json").write_text(json.dumps({"b": 7, "c": 0, "p": 0.015625}))
    card = tmp_path / "results" / "x" / "memrl.run_card.json"
    card.write_text(json.dumps({"git": {"commit": "abc", "dirty": False}}))

    def render(results: Path) -> str:
        r = json.loads((results / "x" / "r.json").read_text())
        cr.CARDS_READ.add(str(results / "x" / "memrl.run_card.json"))
        return f"b = {r['b']}, c = {r['c']}, p = {r['p']:.3f}\n"

    monkeypatch.setitem(cr.RENDERERS, "x", render)
    return tmp_path


def doc(root: Path, body: str) -> Path:
    path = root / "README.md"
    path.write_text(body)
    return path


def test_a_block_that_matches_its_results_passes(fake):
    doc(fake, "# r\n<!-- claims:x -->\nb = 7, c = 0, p = 0.016\n<!-- /claims:x -->\n")
    assert cc.check(fake) == []


def test_a_block_that_differs_fails_and_write_repairs_it(fake):
    path = doc(fake, "<!-- claims:x -->\nb = 9, c = 0, p = 0.004\n<!-- /claims:x -->\n")
    assert any("differs from what results/ gives" in p for p in cc.check(fake))
    assert cc.check(fake, write=True) == []
    assert "b = 7, c = 0, p = 0.016" in path.read_text()
    assert cc.check(fake) == []


def test_a_statistic_typed_outside_a_block_fails_unless_it_is_the_papers(fake):
    doc(fake, "MemRL won: b = 7, c = 0 (p = 0.016).\nThe paper reports r = 0.861.\n")
    problems = cc.check(fake)
    assert len(problems) == 1 and "README.md:1: a statistic outside a claims block" in problems[0]
    for line in ("solved 7/16 games", "Δ = +0.44", "AUC = 0.61", "ρ = 0.99"):
        doc(fake, line + "\n")
        assert cc.check(fake), line
    doc(fake, "```\np = 0.5 in a code block is an example\n```\nk2 = 3, 16 games, 15 steps.\n")
    assert cc.check(fake) == []


def test_an_unknown_block_or_missing_results_fail(fake):
    doc(fake, "<!-- claims:nope -->\n\n<!-- /claims:nope -->\n")
    assert any("no renderer for claims block 'nope'" in p for p in cc.check(fake))
    (fake / "results" / "x" / "r.json").unlink()
    doc(fake, "<!-- claims:x -->\n\n<!-- /claims:x -->\n")
    assert any("block x" in p for p in cc.check(fake))


def test_a_card_made_at_a_dirty_tree_fails(fake):
    (fake / "results" / "x" / "memrl.run_card.json").write_text(json.dumps({"git": {"commit": "abc", "dirty": True}}))
    doc(fake, "<!-- claims:x -->\nb = 7, c = 0, p = 0.016\n<!-- /claims:x -->\n")
    assert any("not made at a clean commit" in p for p in cc.check(fake))


def test_the_repository_docs_pass():
    problems = cc.check(ROOT)
    assert problems == [], "\n".join(problems)
