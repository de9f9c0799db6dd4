"""Every published number re-derived from committed records (docs/experiments.md, "Claims").

README.md and docs/*.md quote measured numbers only inside generated blocks:

    <!-- claims:NAME -->
    ...markdown rendered by RENDERERS[NAME] from results/...
    <!-- /claims:NAME -->

`check` (the default; CI runs it) renders every block again from `results/` and fails on any
difference, on a block whose renderer or results are missing, and on a statistic written by
hand outside a block (a p-value, McNemar's b or c, a Δ, a correlation, an AUC, a success count
such as "7/16 games"), unless its line says "paper reports" (the paper's numbers, cited as
such). It also checks that every run card a renderer read was made at a clean commit.
`--write` rewrites the blocks from the results (then commit both).

    python scripts/check_claims.py [--write] [--root .]
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the scripts folder is not a package
claims_renderers = importlib.import_module("claims_renderers")

BLOCK = re.compile(r"<!-- claims:(?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /claims:(?P=name) -->", re.S)
# statistics that must come from a block, never typed by hand
STAT = re.compile(
    r"(\bp\s*[=≈]\s*0?\.\d"                  # p = 0.016 (a threshold, p < 0.05, is not a result)
    r"|\b[bc]\s*=\s*\d"                      # b = 7, c = 0
    r"|Δ\s*=\s*[-−+]?\d"                     # Δ = +0.44
    r"|\b(?:r|ρ)\s*=\s*[-−+]?\d*\.\d"        # r = 0.997
    r"|\bAUC\s*(?:=|of)\s*0?\.\d"            # AUC = 0.61
    r"|\b\d+\s*/\s*\d+\s+(?:games|tasks)\b"  # 7/16 games
    r")")


def docs(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _outside_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text outside generated blocks and code fences."""
    spans = [(m.start(), m.end()) for m in BLOCK.finditer(text)]
    out, fenced, pos = [], False, 0
    for no, line in enumerate(text.splitlines(keepends=True), 1):
        start, pos = pos, pos + len(line)
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or any(a <= start < b for a, b in spans):
            continue
        out.append((no, line.rstrip("\n")))
    return out


def hand_typed(text: str) -> list[tuple[int, str]]:
    """Lines outside blocks that state a statistic and do not cite the paper."""
    return [(no, line) for no, line in _outside_blocks(text)
            if STAT.search(line) and "paper reports" not in line.lower()]


def render(name: str, root: Path) -> str:
    fn: Callable[[Path], str] | None = claims_renderers.RENDERERS.get(name)
    if fn is None:
        raise KeyError(f"no renderer for claims block {name!r} (scripts/claims_renderers.py)")
    body = fn(root / "results")
    return body if body.endswith("\n") else body + "\n"


def check(root: Path, write: bool = False) -> list[str]:
    problems: list[str] = []
    claims_renderers.CARDS_READ.clear()
    for path in docs(root):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(root)

        def fill(m: re.Match) -> str:
            name = m.group("name")
            try:
                body = render(name, root)
            except (KeyError, FileNotFoundError, ValueError) as exc:
                problems.append(f"{rel}: block {name}: {exc}")
                return m.group(0)
            if body != m.group("body"):
                problems.append(f"{rel}: block {name} differs from what results/ gives"
                                + ("" if write else " (python scripts/check_claims.py --write)"))
            return f"<!-- claims:{name} -->\n{body}<!-- /claims:{name} -->"

        new = BLOCK.sub(fill, text)
        for no, line in hand_typed(new):
            problems.append(f"{rel}:{no}: a statistic outside a claims block: {line.strip()[:120]}")
        if write and new != text:
            path.write_text(new, encoding="utf-8")
    for card in sorted(claims_renderers.CARDS_READ):
        git = json.loads(Path(card).read_text()).get("git") or {}
        if git.get("dirty") is not False or not git.get("commit"):
            problems.append(f"{Path(card).relative_to(root)}: not made at a clean commit (git: {git})")
    if write:  # what is left after the rewrite is what --write cannot fix
        problems = [p for p in problems if "differs from what results/ gives" not in p]
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the blocks from results/")
    ap.add_argument("--root", type=Path, default=ROOT)
    a = ap.parse_args(argv)
    problems = check(a.root.resolve(), write=a.write)
    for p in problems:
        print(p)
    n = sum(len(BLOCK.findall(p.read_text(encoding="utf-8"))) for p in docs(a.root) if p.is_file())
    print(f"claims: {n} blocks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
