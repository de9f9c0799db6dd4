"""What each claims block of README.md and docs/ says, rendered from committed results alone
(scripts/check_claims.py). A renderer takes the results folder and returns markdown; every run
card it reads goes into `CARDS_READ`, whose cards the check requires clean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

CARDS_READ: set[str] = set()
SENSITIVITY = "tie_rule_sensitivity"


def _json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not in the repository")
    return json.loads(path.read_text(encoding="utf-8"))


def _p(x: float) -> str:
    return "< 0.001" if x < 0.001 else f"{x:.3f}"


def _signed(x: float) -> str:
    return f"{x:+.2f}".replace("+0.00", "0.00").replace("-0.00", "0.00")


def _cards(folder: Path, runs: list[str]) -> None:
    """Every run card a result was made from (`<arm>.<split>.run_card.json`): the check requires
    each clean."""
    for run in runs:
        card = folder / f"{run}.run_card.json"
        if not card.is_file():
            raise FileNotFoundError(f"{card} is not in the repository")
        CARDS_READ.add(str(card))


def _condition_rows(results: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    from memrl.demo.sensitivity import CONDITIONS

    design = _json(results / SENSITIVITY / "design" / "power.json")
    power = {(p["condition"], p["variant"]): p for p in design["predictions"]}
    rows = []
    for cond in CONDITIONS:
        res = _json(results / SENSITIVITY / cond.name / "result.json")
        _cards(results / SENSITIVITY / cond.name, list(res["runs"]))
        rows.append((res, power))
    return rows


def sensitivity_outcomes(results: Path) -> str:
    """Per condition and arm against RAG: solved per epoch, the final epoch's exact McNemar
    (with the Holm-adjusted p over the twelve conditions' paper-MemRL tests) and paired
    bootstrap Δ, the CSR-style test, and the power predicted before the runs."""
    from memrl.report.stats import holm

    rows = _condition_rows(results)
    primary = [res["paired"]["memrl vs rag"]["final"]["mcnemar_p"] for res, _ in rows]
    adjusted = dict(zip((res["condition"] for res, _ in rows), holm(primary)))
    head = ("| ties | order | k2 | arm | solved per epoch (arm / RAG) | final b / c | exact p (Holm) | "
            "Δ final [95% CI] | CSR-style b / c (p) | predicted power |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for res, power in rows:
        n = res["games"]
        for arm in [a for a in res["solved"] if a != "rag"]:
            pair = res["paired"][f"{arm} vs rag"]
            fin, csr = pair["final"], pair["csr"]
            variant = "paper" if arm == "memrl" else arm.removeprefix("memrl_")
            pred = power.get((res["condition"], variant))
            predicted = "–" if pred is None else f"{pred['power']:.2f}"
            p = _p(fin["mcnemar_p"]) + (f" ({_p(adjusted[res['condition']])})" if arm == "memrl" else "")
            solved = f"{' '.join(map(str, res['solved'][arm]))} / {' '.join(map(str, res['solved']['rag']))} of {n}"
            lines.append(
                f"| {res['ties']} | {res['order']} | {res['k2']} | {arm} | {solved} | "
                f"{fin['a_only']} / {fin['b_only']} | {p} | "
                f"{_signed(fin['delta'])} [{_signed(fin['delta_lo'])}, {_signed(fin['delta_hi'])}] | "
                f"{csr['a_only']} / {csr['b_only']} ({_p(csr['mcnemar_p'])}) | "
                f"{predicted} |")
    return head + "\n".join(lines) + "\n"


def sensitivity_mechanism(results: Path) -> str:
    """Per condition and arm: re-injections of a memory already injected into a failure, the
    arm's own failure memories shown (epochs 2 on), and whether Q predicted outcomes."""
    head = ("| ties | order | k2 | arm | re-injected after a failure (of injections, epochs 2+) | "
            "own failure memories shown (epochs 2+) | Q before → outcome: AUC [95% CI] |\n"
            "|---|---|---|---|---|---|---|\n")
    lines = []
    for res, _ in _condition_rows(results):
        for arm in res["solved"]:
            h1 = res["h1"][arm]
            own = sum(v["own_failure"] for e, v in res["own_failure_injections"][arm].items() if int(e) >= 2)
            qp = res["utility"][arm]["q_prospective"]
            auc = "–" if qp["auc"] is None else (
                f"{qp['auc']:.2f}" + (f" [{qp['auc_ci'][0]:.2f}, {qp['auc_ci'][1]:.2f}]" if qp["auc_ci"] else ""))
            lines.append(f"| {res['ties']} | {res['order']} | {res['k2']} | {arm} | "
                         f"{h1['reinjected_after_failure']} of {h1['injections_epoch2_on']} | {own} | {auc} |")
    return head + "\n".join(lines) + "\n"


def _kinds(counts: dict[str, int]) -> str:
    return "/".join(str(counts.get(k, 0)) for k in ("solution", "attempt", "own_failure", "other_game"))


def sensitivity_why(results: Path) -> str:
    """Per condition and arm: the first memory shown per epoch, by kind (a solution of the game /
    its failed attempt / its own failure / another game's memory), and for MemRL's arms why a
    game was not shown its solution in epochs 2+ (memrl.demo.shown)."""
    head = ("| ties | order | k2 | arm | first memory shown, epoch 1 · 2 · 3 (solution/attempt/own failure/"
            "other game) | not shown a solution it had (epochs 2+): failed there / lowered by another game / "
            "tie in Q / lost the score |\n|---|---|---|---|---|---|\n")
    lines = []
    for res, _ in _condition_rows(results):
        for arm, per in res["shown_first"].items():
            kinds = " · ".join(_kinds(per.get(str(e), {})) for e in range(1, len(res["solved"][arm]) + 1))
            w = res["why_not_solution"].get(arm)
            why = "–" if w is None else " / ".join(str(w["causes"].get(k, 0)) for k in (
                "solution_failed_here", "solution_lowered_elsewhere", "tie_in_q", "solution_q_above"))
            lines.append(f"| {res['ties']} | {res['order']} | {res['k2']} | {arm} | {kinds} | {why} |")
    return head + "\n".join(lines) + "\n"


def sensitivity_power(results: Path) -> str:
    """The power analysis committed with the pre-registration (design/power.json)."""
    design = _json(results / SENSITIVITY / "design" / "power.json")
    head = ("| ties | order | k2 | arm | predicted solved per epoch (arm / RAG) | mean b / c | "
            "power (exact McNemar, α 0.05) |\n|---|---|---|---|---|---|---|\n")
    lines = []
    for p in design["predictions"]:
        ties, order, k = p["condition"].split("_")
        k = k.removeprefix("k")
        arm = "memrl" if p["variant"] == "paper" else f"memrl_{p['variant']}"
        sr = " ".join(f"{x * p['n_games']:.1f}" for x in p["sr"]["memrl"])
        rag = " ".join(f"{x * p['n_games']:.1f}" for x in p["sr"]["rag"])
        lines.append(f"| {ties} | {order} | {k} | {arm} | {sr} / {rag} of {p['n_games']} | "
                     f"{p['b']:.1f} / {p['c']:.1f} | {p['power']:.2f} |")
    return head + "\n".join(lines) + "\n"


def sensitivity_games(results: Path) -> str:
    """How many games the design took, from which splits, and how many were eligible."""
    design = _json(results / SENSITIVITY / "design" / "games.json")
    splits: dict[str, int] = {}
    for g in design["games"]:
        splits[g["split"]] = splits.get(g["split"], 0) + 1
    per = ", ".join(f"{n} of `{s}`" for s, n in splits.items())
    return (f"**{len(design['games'])} games** ({per}; {design['eligible']} eligible), "
            f"{design['epochs']} epochs.\n")


def _wall_s(card: dict[str, Any]) -> float:
    """Seconds the run's sessions took (started to ended, summed)."""
    from datetime import datetime

    total = 0.0
    for sess in card.get("sessions") or []:
        if sess.get("started") and sess.get("ended"):
            total += (datetime.fromisoformat(sess["ended"]) - datetime.fromisoformat(sess["started"])).total_seconds()
    return total


def _solved(metrics: dict[str, Any]) -> str:
    n = metrics["n_tasks"]
    return " ".join(str(round(x * n)) for x in metrics["sr"]) + f" of {n}"


def first_run(results: Path) -> str:
    """README's first run: each run's games, epochs, wall time and games solved per epoch."""
    folder = results / "first_run"
    lines = []
    for name in ("memrl", "rag"):
        card = _json(folder / f"{name}.run_card.json")
        CARDS_READ.add(str(folder / f"{name}.run_card.json"))
        m = _json(folder / f"{name}.metrics.json")
        lines.append(f"- `{card['config']['memory']['name']}`: {m['n_tasks']} games x {m['epochs']} epochs in "
                     f"{_wall_s(card):.0f} s; solved per epoch {_solved(m)}")
    commit = card["git"]["commit"][:7]
    return (f"Measured on the development machine's 2 cores (results/first_run/, commit {commit}):\n\n"
            + "\n".join(lines) + "\n")


def demo(results: Path) -> str:
    """`make demo` as last run: its condition, wall time, games solved per epoch, the final
    epoch's test and the power predicted for it."""
    folder = results / "demo_alfworld_gemma270m"
    res = _json(folder / "demo.json")
    for card in sorted(folder.glob("*.run_card.json")):
        CARDS_READ.add(str(card))
    cond, n = res["condition"], len(res["games"])
    wall = sum(p["seconds"] for p in res["phases"])
    solved = "; ".join(f"{m} {' '.join(str(round(x * n)) for x in sr)}" for m, sr in res["sr"].items())
    fin = res["across_epochs"]["final"]
    verdict = "significant" if fin["mcnemar_p"] < 0.05 else "not significant"
    pred = (res.get("power") or {}).get("predicted") or {}
    return (f"Last run (results/demo_alfworld_gemma270m/): {wall:.0f} s wall on the development machine's 2 cores "
            f"(a record, not a benchmark: other work may have shared them); "
            f"{n} games ({cond['split']}), ties {cond['ties']}, {cond['k2']} memory shown, {cond['epochs']} epochs. "
            f"Games solved per epoch: {solved}. Final epoch, MemRL against RAG: b = {fin['a_only']}, "
            f"c = {fin['b_only']}, exact p = {_p(fin['mcnemar_p'])} ({verdict} at α 0.05; power predicted "
            f"before the run {pred.get('power', float('nan')):.2f}).\n")


def test_times(results: Path) -> str:
    """The suite's times from a `.ci/run` on a fresh clone (results/test_times/, written by
    scripts/ci_times.py from its log)."""
    runs = _json(results / "test_times" / "ci_runs.json")
    lines = []
    for r in runs:
        lines.append(f"- {r['label']}: set-up {r['setup_s']} s, parallel pass {r['parallel_s']} s, serial pass "
                     f"{r['serial_s']} s, {r['total_s']} s in all; {r['passed']} passed, {r['failed']} failed, "
                     f"{r['skipped']} skipped (commit {r['commit'][:7]})")
    return "Measured with `.ci/run` on a fresh clone, 2 cores (results/test_times/):\n\n" + "\n".join(lines) + "\n"


def _fig(x: dict[str, Any]) -> str:
    return f"{x['wall_s']:.0f} s, {x['peak_rss_mb']:.0f} MB"


def scale(results: Path) -> str:
    """The paper-scale benchmark before and after issue 34's changes, at its two sizes and
    extrapolated to the paper's ALFWorld run (results/bench_scale/{before,after}.json)."""
    runs = {w: _json(results / "bench_scale" / f"{w}.json") for w in ("before", "after")}
    cols = []
    for w, d in runs.items():
        for r in d["results"]:
            cols.append((f"{w}, {r['episodes']:,} ep", r, r["tools"], r["reopen"]))
        x = d["extrapolated"]
        cols.append((f"{w}, {x['episodes']:,} ep (extrapolated)", None, x["tools"], x["reopen"]))
    tools = list(runs["after"]["results"][0]["tools"])
    head = "| | " + " | ".join(c[0] for c in cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    rows = []
    per_ep = ["harness CPU ms / episode"]
    disk = ["disk beyond the record, B / episode"]
    for name, r, _, _ in cols:
        if r is None:
            d = runs[name.split(",")[0]]["extrapolated"]
            per_ep.append(f"{d['harness_ms_per_episode_marginal']['cpu']:.1f} (marginal)")
            disk.append(f"{d['beyond_record_per_episode']:,.0f}")
        else:
            per_ep.append(f"{r['harness_ms_per_episode']['cpu']:.1f}")
            disk.append(f"{r['beyond_record_per_episode']:,.0f}")
    rows += [per_ep, disk, ["reopen (wall, peak RSS)"] + [_fig(c[3]) for c in cols]]
    for t in tools:
        rows.append([f"`{t}` (wall, peak RSS)"] + [_fig(c[2][t]) for c in cols])
    rows.append(["view page MB (+ side files)"] + [f"{c[2]['view']['page_bytes'] / 1e6:.1f} + "
                                                   f"{c[2]['view'].get('side_bytes', 0) / 1e6:.1f}" for c in cols])
    notes = "; ".join(f"{w}: commit {d['commit'][:7]}, load {d['results'][0]['load'][0]:.1f} to "
                      f"{d['results'][-1]['load'][1]:.1f}" for w, d in runs.items())
    return head + "\n".join("| " + " | ".join(r) + " |" for r in rows) + f"\n\n({notes}.)\n"


def socket_flood(results: Path) -> str:
    """The socket_flood case without and with the socket-buffer cap, per sandbox mode
    (results/sandbox_issue32/{socket_flood_uncapped,conformance}.json)."""
    folder = results / "sandbox_issue32"
    files = {"no cap (before issue 32)": "socket_flood_uncapped.json", "`Limits.tcp_mb` set": "conformance.json"}
    lines = ["| | mode | host TCP memory rise | host UDP memory rise | sandbox cgroup memory peak |",
             "|---|---|---|---|---|"]
    for label, name in files.items():
        data = _json(folder / name)
        for key in sorted(k for k in data if k.endswith("/socket_flood")):
            r = data[key]
            lines.append(f"| {label} | {key.split('/')[0]} | +{r['host_tcp_memory_rise_mb']:.1f} MB | "
                         f"+{r['host_udp_memory_rise_mb']:.1f} MB | {r['cgroup_memory_peak_mb']:.1f} MB |")
    return "\n".join(lines) + f"\n\n(host `/proc/net/sockstat`, sampled from the host; results/{folder.name}/)\n"


RENDERERS: dict[str, Callable[[Path], str]] = {
    "socket-flood": socket_flood,
    "scale": scale,
    "test-times": test_times,
    "first-run": first_run,
    "demo": demo,
    "sensitivity-games": sensitivity_games,
    "sensitivity-outcomes": sensitivity_outcomes,
    "sensitivity-mechanism": sensitivity_mechanism,
    "sensitivity-why": sensitivity_why,
    "sensitivity-power": sensitivity_power,
}
