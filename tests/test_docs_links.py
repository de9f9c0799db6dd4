"""The README is the way into the docs: every page in docs/ is linked from README.md directly, and
every relative link in README.md and docs/*.md reaches an existing file and, where it names
one, an existing heading (anchors as GitHub makes them from headings)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text without code blocks and code spans, where nothing is a link or a heading."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for h in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(h)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def broken_links(root: Path) -> list[str]:
    """Every relative link of README.md and docs/*.md that reaches no file or no heading."""
    problems = []
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(root)}: ({target})"
            if not dest.exists():
                problems.append(f"{where}: no file {file_part}")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                problems.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    return problems


def unlinked_pages(root: Path) -> list[str]:
    """docs/*.md pages the README does not link to."""
    readme = root / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in links(readme)}
    return [str(p.relative_to(root)) for p in sorted((root / "docs").glob("*.md")) if p.resolve() not in linked]


def test_every_docs_page_is_linked_from_the_readme():
    assert unlinked_pages(ROOT) == []


def test_every_relative_link_resolves():
    assert broken_links(ROOT) == []


def test_the_checks_catch_a_missing_link_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Page A\n\n## Why `ties` matter: a note\n\n[back](../README.md#top)\n")
    (tmp_path / "docs" / "b.md").write_text("# Page B\n\n```\n[not a link](nowhere.md)\n# not a heading\n```\n")
    (tmp_path / "README.md").write_text(
        "# Top\n\n[a](docs/a.md#why-ties-matter-a-note) [bad anchor](docs/a.md#why-ties-matter)\n"
        "[gone](docs/gone.md) `[in code](docs/b.md)` [web](https://example.org/x.md)\n")
    assert unlinked_pages(tmp_path) == ["docs/b.md"]
    assert broken_links(tmp_path) == [
        "README.md: (docs/a.md#why-ties-matter): no heading #why-ties-matter in docs/a.md",
        "README.md: (docs/gone.md): no file docs/gone.md",
    ]


def test_anchors_follow_githubs_rule():
    assert slug("8. The run directory, resume, caches") == "8-the-run-directory-resume-caches"
    assert slug("The preflight and `memrl check`") == "the-preflight-and-memrl-check"
    assert slug("Gemini's prices: one home") == "geminis-prices-one-home"
    assert slug("Tie-rule sensitivity: pre-registration") == "tie-rule-sensitivity-pre-registration"
