"""The report's tables as LaTeX (`<table>.tex`), in the booktabs style a paper uses:
\\toprule / \\midrule / \\bottomrule, no vertical rules, the caption saying what the numbers
are and which interval they carry. Each file is a `table` float that `\\input` takes as it
is; the preamble needs `\\usepackage{booktabs}`. Text is escaped for LaTeX (`escape`).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
            "Δ": r"$\Delta$", "λ": r"$\lambda$", "α": r"$\alpha$", "δ": r"$\delta$", "χ²": r"$\chi^2$",
            "–": "--", "…": r"\ldots{}", "≥": r"$\geq$", "−": "-", "ρ": r"$\rho$", "ε": r"$\varepsilon$"}
_PATTERN = re.compile("|".join(re.escape(k) for k in sorted(_SPECIAL, key=len, reverse=True)))


def escape(text: Any) -> str:
    """`text` with LaTeX's special characters (and the Greek letters the report prints)
    written so that LaTeX prints them."""
    return _PATTERN.sub(lambda m: _SPECIAL[m.group(0)], str(text))


def latex_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, caption: str,
                label: str, align: str | None = None) -> str:
    """A booktabs `table` with `headers`, `rows`, a caption and a `\\label{tab:<label>}`;
    `align`: the column spec (default: the first two columns left, the rest right)."""
    spec = align or "".join("l" if i < 2 else "r" for i in range(len(headers)))
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{escape(caption)}}}", rf"\label{{tab:{re.sub(r'[^A-Za-z0-9:_-]', '-', label)}}}",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(escape(h) for h in headers) + r" \\", r"\midrule"]
    lines += [" & ".join(escape(c) for c in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"
