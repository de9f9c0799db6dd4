"""The MemRL page: one self-contained HTML file (plotly with its JavaScript inlined; no
server, no network) for one run or several (a sweep: the methods overlaid).

Sections (each an element with the id given):
- `summary`: the runs (label, identity, status, tasks, epochs, Last and CSR with their 95%
  Wilson intervals over the run's tasks, errored, spend, and whether Q predicts outcomes: the
  AUC of the Q a memory had before an episode for that episode's success, with its 95%
  bootstrap interval; memrl.metrics.utility.q_prospective), then notes: runs left out as
  copies of another seed's, runs shown under --include-unfinished, each run's warnings
  (memrl.metrics.degenerate);
- `success-grid`: task × epoch per run (success, failure, error; forgetting is a green cell
  followed by a grey one);
- `curves`: SR, CSR and forgetting per epoch, every run overlaid, each point with its 95%
  Wilson interval over the run's tasks (forgetting: its failed tasks), the interval the
  report and the run's plots give one replicate (memrl.report.intervals);
- `bank-size`: entries in the bank after every commit;
- `q-trajectories`: Q over time of each run's most-injected memories;
- `q-distribution`: the bank's Q at the end of each epoch;
- `q-calibration`: success rate by the mean Q of the injected memories, with each bin's n
  and its 95% Wilson interval;
- `task-memories`: for a chosen task, the memories its episodes wrote and the episodes each
  one was injected into, helped (the episode succeeded) or hurt (it failed); inline, or for a
  long run loaded from a folder beside the page (memrl/view/tasks.py).

Each series (a method, or in a parameter sweep a method's setting, e.g. `lam=0.5`) keeps one
colour, marker and dash on every chart, so lines that coincide stay apart; its further seeds
are drawn thinner.
"""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

from memrl.view.data import RunView
from memrl.view.tasks import SideFiles, task_section

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
MARKERS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
SECTIONS = ("summary", "success-grid", "curves", "bank-size", "q-trajectories", "q-distribution",
            "q-calibration", "task-memories")


def _labels(runs: Sequence[RunView]) -> list[tuple[str, str]]:
    """(series, seed) per run: the series is the run's label without its seed
    (memrl.view.labels: the method with the settings that tell the runs apart, e.g.
    `memrl (lam=0.5)` in a λ sweep, as the report names its rows); the seed where seeds
    differ."""
    from memrl.view.labels import assign_labels

    if any(not r.series for r in runs):
        assign_labels(runs)
    seeds = {r.seed for r in runs}
    return [(r.series, f"seed {r.seed}" if len(seeds) > 1 else "") for r in runs]


def _styles(runs: Sequence[RunView]) -> list[dict[str, Any]]:
    """One colour, marker and dash per series (a method, or a method's swept setting); the
    seeds of a series share them, the first drawn thicker. `name` is the legend entry."""
    labels = _labels(runs)
    series = list(dict.fromkeys(lab for lab, _ in labels))
    seen: dict[str, int] = {}
    out = []
    for lab, seed in labels:
        m = series.index(lab)
        k = seen.get(lab, 0)
        seen[lab] = k + 1
        out.append({"color": COLORS[m % len(COLORS)], "symbol": MARKERS[m % len(MARKERS)],
                    "dash": DASHES[m % len(DASHES)], "width": 2.5 if k == 0 else 1.2,
                    "name": f"{lab} {seed}".strip()})
    return out


def _div(fig: Any, div_id: str, height: int) -> str:
    import plotly.io as pio

    fig.update_layout(height=height, margin={"l": 60, "r": 20, "t": 60, "b": 50},
                      template="plotly_white", legend={"font": {"size": 11}})
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config=PLOT_CONFIG, default_height=f"{height}px")


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


# ------------------------------------------------------------------------------ sections
def _q_prospective(qp: dict, f) -> str:
    """AUC [95% interval] (n injections), or – where it is undefined: does the Q a memory had
    before an episode predict that episode's outcome (memrl.metrics.utility.q_prospective)."""
    if qp["auc"] is None:
        return f"– ({qp['injections']} injections)"
    ci = qp["auc_ci"]
    return f(qp["auc"]) + (f" [{f(ci[0])}, {f(ci[1])}]" if ci else "") + f" ({qp['injections']} injections)"


def rate_intervals(r: RunView, which: str) -> list[Any]:
    """Per point of one run's SR, CSR or forgetting curve: the rate with its 95% Wilson
    interval over the run's tasks (forgetting: over the epoch's failed tasks), the interval
    the report and the run's own plots draw for one replicate (memrl.report.intervals)."""
    from memrl.report.intervals import proportion
    from memrl.report.series import curve_counts

    if not r.records:
        return []
    unit = "failed tasks" if which == "forgetting" else "tasks"
    return [proportion(k, n, unit) for k, n in curve_counts(r.S, which)]


def _summary(runs: Sequence[RunView]) -> str:
    from memrl.journal.runcard import identity_label
    from memrl.report.intervals import fmt

    rows = []
    for r in runs:
        s = r.summary()
        def f(v: Any) -> str:
            return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"

        last, csr = ((rate_intervals(r, w) or [None])[-1] for w in ("sr", "csr"))
        rows.append(
            "<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in (
                r.label, identity_label(r.ident), s["status"], s["tasks"], s["epochs"], s["episodes"],
                fmt(last) if last else "–", fmt(csr) if csr else "–", s["errored"], f"${s['spend']:.4f}",
                _q_prospective(s["q_prospective"], f), "yes" if s["bank_log"] else "no", s["path"])) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in (
        "run", "env / method / model / seed", "status", "tasks", "epochs", "episodes",
        "Last [95% Wilson, n = tasks]", "CSR [95% Wilson, n = tasks]", "errored", "spend",
        "Q before → outcome, AUC", "bank log", "directory"))
    return f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _grids(runs: Sequence[RunView]) -> str:
    import plotly.graph_objects as go

    parts = []
    scale = [[0.0, "#d62728"], [0.333, "#d62728"], [0.334, "#dddddd"], [0.666, "#dddddd"],
             [0.667, "#2ca02c"], [1.0, "#2ca02c"]]
    for i, r in enumerate(runs):
        g = r.grid()
        if not g["tasks"]:
            continue
        intents = {x.task_id: x.intent for x in r.records}
        ylabels = [f"{j + 1}. {intents.get(t, t)[:48]}" for j, t in enumerate(g["tasks"])]
        # the hover names the row's task from its label: a cell carries only its outcome
        fig = go.Figure(go.Heatmap(z=g["z"], x=g["epochs"], y=ylabels, zmin=-1, zmax=1,
                                   colorscale=scale, showscale=False, xgap=2, ygap=2,
                                   text=g["text"], hovertemplate="%{y}<br>epoch %{x}: %{text}<extra></extra>"))
        fig.update_layout(title=f"{r.label}: success per task and epoch "
                                f"(green success, grey failure, red error)",
                          xaxis={"title": "epoch", "dtick": 1}, yaxis={"autorange": "reversed"})
        parts.append(_div(fig, f"grid-{i}", 140 + 22 * len(g["tasks"])))
    return "".join(parts) or _note("no episode recorded yet")


def _curves(runs: Sequence[RunView], styles: list[dict[str, Any]]) -> str:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=("SR per epoch", "CSR per epoch",
                                                        "forgetting rate (epochs ≥ 2)"))
    for r, st in zip(runs, styles):
        c = r.curves()
        name = st["name"]
        for col, (key, start) in enumerate((("sr", 1), ("csr", 1), ("forgetting", 2)), 1):
            ys = c[key]
            ests = rate_intervals(r, key)[:len(ys)]
            fig.add_trace(go.Scatter(
                x=list(range(start, start + len(ys))), y=ys, mode="lines+markers", name=name,
                legendgroup=name, showlegend=col == 1,
                line={"color": st["color"], "dash": st["dash"], "width": st["width"]},
                marker={"symbol": st["symbol"], "size": 9},
                error_y={"type": "data", "symmetric": False, "thickness": 1,
                         "array": [0 if math.isnan(e.hi) else e.hi - y for e, y in zip(ests, ys)],
                         "arrayminus": [0 if math.isnan(e.lo) else y - e.lo for e, y in zip(ests, ys)]},
                hovertext=[e.how for e in ests]), row=1, col=col)
    fig.update_xaxes(title_text="epoch", dtick=1)
    fig.update_yaxes(range=[-0.03, 1.03])
    n = sorted({len(r.task_ids) for r in runs})
    fig.update_layout(title=f"{' / '.join(sorted({r.ident['env'] for r in runs}))}: "
                            f"{', '.join(map(str, n))} tasks; one point per epoch per run, "
                            "bars: 95% Wilson over the run's tasks (forgetting: its failed tasks)")
    return _div(fig, "curves-plot", 420)


def _bank_size(runs: Sequence[RunView], styles: list[dict[str, Any]]) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    missing = []
    for r, st in zip(runs, styles):
        pts = r.bank_sizes()
        if not pts:
            missing.append(r.label)
            continue
        fig.add_trace(go.Scatter(x=[x for x, _ in pts], y=[s for _, s in pts], mode="lines+markers",
                                 name=st["name"],
                                 line={"color": st["color"], "dash": st["dash"], "width": st["width"], "shape": "hv"},
                                 marker={"symbol": st["symbol"], "size": 6}))
    fig.update_layout(title="entries in the memory bank after each commit",
                      xaxis={"title": "epoch (commits spread over each epoch)", "dtick": 1},
                      yaxis={"title": "entries", "rangemode": "tozero"})
    note = _note("no bank (or no bank-update log): " + "; ".join(missing)) if missing else ""
    return (_div(fig, "bank-size-plot", 380) if len(missing) < len(runs) else "") + note


def _trajectories(runs: Sequence[RunView]) -> str:
    import plotly.graph_objects as go

    parts = []
    for i, r in enumerate(runs):
        top = r.top_trajectories()
        if not top or not r.has_log:
            continue
        fig = go.Figure()
        for j, t in enumerate(top):
            fig.add_trace(go.Scatter(x=t["x"], y=t["q"], mode="lines+markers",
                                     name=f"{t['id'][:40]} ({t['injected']}×)",
                                     line={"color": COLORS[j % len(COLORS)], "dash": DASHES[j % len(DASHES)]},
                                     marker={"symbol": MARKERS[j % len(MARKERS)], "size": 7},
                                     hovertext=t["id"]))
        fig.update_layout(title=f"{r.label}: Q of the {len(top)} most-injected memories",
                          xaxis={"title": "epoch (commits spread over each epoch)", "dtick": 1},
                          yaxis={"title": "Q"})
        parts.append(_div(fig, f"qtraj-{i}", 400))
    return "".join(parts) or _note("no run injected a memory that its bank-update log follows")


def _q_distribution(runs: Sequence[RunView], styles: list[dict[str, Any]]) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    any_q = False
    thinned = False
    for r, st in zip(runs, styles):
        per = {e: order_statistics(qs, BOX_POINTS) for e, qs in r.q_per_epoch().items()}
        thinned = thinned or any(len(qs) > BOX_POINTS for qs in r.q_per_epoch().values())
        xs = [e for e, qs in per.items() for _ in qs]
        ys = [q for qs in per.values() for q in qs]
        if not ys:
            continue
        any_q = True
        fig.add_trace(go.Box(x=xs, y=ys, name=st["name"], marker_color=st["color"],
                             boxpoints="all", jitter=0.4, pointpos=0))
    fig.update_layout(title="Q of every memory in the bank at the end of each epoch"
                            + (f" (past {BOX_POINTS} memories: {BOX_POINTS} evenly spaced order statistics)"
                               if thinned else ""),
                      boxmode="group", xaxis={"title": "epoch", "dtick": 1}, yaxis={"title": "Q"})
    return _div(fig, "q-distribution-plot", 400) if any_q else _note("no bank Q recorded")


BOX_POINTS = 2000  # Q values drawn per run and epoch: past it, evenly spaced order statistics


def order_statistics(values: Sequence[float], n: int) -> list[float]:
    """`values` sorted, or past `n` of them the `n` at evenly spaced ranks (the least and the
    greatest kept), so a box's quartiles move by at most one rank step."""
    v = sorted(values)
    if len(v) <= n:
        return v
    return [v[round(i * (len(v) - 1) / (n - 1))] for i in range(n)]


def _calibration(runs: Sequence[RunView], styles: list[dict[str, Any]]) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    shown = False
    for r, st in zip(runs, styles):
        rows = r.calibration()
        if not rows:
            continue
        shown = True
        x = [(b["q_lo"] + b["q_hi"]) / 2 for b in rows]
        y = [b["success_rate"] for b in rows]
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines+markers+text", name=st["name"],
            text=[f"n={b['n_episodes']}" for b in rows], textposition="top right",
            line={"color": st["color"], "dash": st["dash"]}, marker={"symbol": st["symbol"], "size": 9},
            error_y={"type": "data", "symmetric": False,
                     "array": [b["wilson_hi"] - b["success_rate"] for b in rows],
                     "arrayminus": [b["success_rate"] - b["wilson_lo"] for b in rows]}))
    fig.update_layout(title="Q calibration: success rate by the mean Q of the injected memories "
                            "(n = episodes per bin; bars: 95% Wilson interval)",
                      xaxis={"title": "mean Q of the injected memories (bin centre)"},
                      yaxis={"title": "episode success rate", "range": [-0.05, 1.05]})
    return _div(fig, "q-calibration-plot", 420) if shown else _note("no episode had memories injected")


CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ddd; padding: 3px 6px; vertical-align: top; }
th { background: #f3f3f3; } .note { color: #666; font-style: italic; }
pre { white-space: pre-wrap; max-width: 60em; max-height: 14em; overflow: auto; margin: 0; font-size: 0.9em; }
.helped { color: #2ca02c; } .hurt { color: #d62728; } select { max-width: 40em; }
"""


def _notes(runs: Sequence[RunView], copies: Sequence[Any]) -> str:
    """What the summary says beside its table: copies left out, marked runs, each run's
    warnings (settings under which its method behaved as another: memrl.metrics.degenerate),
    runs without a bank-update log."""
    out = []
    if copies:
        out.append("not independent replicates, left out of every chart (their episodes repeat another "
                   "seed's): " + "; ".join(f"{c.run.path} (seed {c.run.seed} = seed {c.of.seed}: {c.reason})"
                                           for c in copies))
    marked = [r.label for r in runs if r.marks]
    if marked:
        out.append("[unfinished]: a run that did not finish (its status or fewer epochs than planned), shown "
                   "under --include-unfinished with what it completed: " + "; ".join(marked))
    from memrl.metrics.degenerate import run_warnings

    for r in runs:
        out += [f"warning, {r.label}: {w}" for w in run_warnings({**r.card, "config": r.config}, r.records)]
    no_log = [r.label for r in runs if not r.has_log]
    if no_log:
        out.append("no complete bank-update log (the run predates bank_updates.jsonl): no bank panels for "
                   + "; ".join(no_log))
    return "".join(_note(x) for x in out)


def build_page(runs: Sequence[RunView], *, task: str | None = None, title: str | None = None,
               copies: Sequence[Any] = (), side: SideFiles | None = None) -> str:
    """The page's HTML for these runs (`copies`: the runs left out as copies of another seed's,
    memrl.view.labels.drop_copies; `side`: where the task panel's data may go when it is too
    large to be inline; None: always inline)."""
    from plotly.offline import get_plotlyjs

    from memrl.journal.runcard import identity_label

    styles = _styles(runs)
    title = title or ("MemRL run: " + identity_label(runs[0].ident) if len(runs) == 1
                      else f"MemRL sweep: {len(runs)} runs")
    sections = {
        "summary": ("Runs", _summary(runs) + _notes(runs, copies)),
        "success-grid": ("Success per task and epoch", _grids(runs)),
        "curves": ("SR, CSR and forgetting", _curves(runs, styles)),
        "bank-size": ("Bank size over time", _bank_size(runs, styles)),
        "q-trajectories": ("Q trajectories of the most-injected memories", _trajectories(runs)),
        "q-distribution": ("Q distribution per epoch", _q_distribution(runs, styles)),
        "q-calibration": ("Q calibration", _calibration(runs, styles)),
        "task-memories": ("One task's memories: which episodes they helped or hurt",
                          task_section(runs, task, side)),
    }
    body = "".join(f'<section id="{sid}"><h2>{html.escape(h)}</h2>{content}</section>'
                   for sid, (h, content) in sections.items())
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style>"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head>"
            f"<body><h1>{html.escape(title)}</h1>{body}</body></html>")
