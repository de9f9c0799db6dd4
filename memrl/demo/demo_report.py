"""What `make demo` prints and writes (memrl.demo.pipeline runs it and reads it): `demo.md`
(first what the demo's condition shows and does not, with its power; then the tables),
`demo.json`, `demo.png`, and the cross-run report."""

from __future__ import annotations

from pathlib import Path

from memrl.demo.pipeline import ALPHA, REFERENCE, DemoResult, min_discordant

def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _rate(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


_TIES = {"random": "at random (drawn per query)", "oldest": "oldest first", "newest": "newest first"}


def what_it_shows(res: DemoResult) -> list[str]:
    """The demo's first lines: the condition it ran, what it measured against RAG and how
    strong that reading can be at this size (its predicted power), and where the full
    experiment is. Said from this run's own numbers, never from a fixed text."""
    cond, n = res.condition, len(res.games)
    out = ["## What this demo shows, and what it does not", "",
           f"MemRL against RAG on {n} games, both writing every episode from a history bank (each game's "
           f"failed attempt and the expert's solution, tied at similarity 1), ties broken "
           f"**{_TIES.get(cond.get('ties'), cond.get('ties'))}** for both methods (memory order {cond.get('order')}), "
           f"{cond.get('k2')} memory shown, {cond.get('epochs')} epochs, temperature 0."]
    fin = (res.across or {}).get("final")
    pred = (res.power or {}).get("predicted")
    if fin:
        significant = fin["mcnemar_p"] < ALPHA
        out.append(f"Final epoch: MemRL solved {round(fin['a'] * n)}, RAG {round(fin['b_rate'] * n)}; "
                   f"games only MemRL solved b = {fin['a_only']}, only RAG c = {fin['b_only']}, exact McNemar "
                   f"p = {fin['mcnemar_p']:.3g}: " + (f"**a significant difference** at α = {ALPHA}."
                                                     if significant else f"**no significant difference** at "
                                                     f"α = {ALPHA}."))
    if pred:
        out.append(f"At {n} games this comparison has power {pred['power']:.2f} (predicted from the games and "
                   "the student model alone, before any outcome: docs/experiments.md), so "
                   + ("a null result here says little." if pred["power"] < 0.8
                      else "it can detect the predicted gain."))
    if cond.get("ties") in ("oldest", "newest") and cond.get("order") == "history":
        out.append(f"Under `{cond.get('ties')}` with the history order the tie rule alone decides which of a game's "
                   "two memories RAG shows: this run illustrates a mechanism, it is not evidence for MemRL.")
    out.append("It does not show paper-scale numbers (a 270M base model that copies trajectories) nor a "
               "result under every tie rule: the pre-registered tie-rule sensitivity experiment (every tie "
               "rule × memory order × k2, more games) is in docs/experiments.md.")
    return out


def render(res: DemoResult) -> str:
    n = len(res.games)
    epochs = max((len(v) for v in res.sr.values()), default=0)
    t = res.teacher
    cond = res.condition
    lines = [f"# memrl demo: {n} ALFWorld games ({cond.get('split', '?')}), student {res.model}",
             "", *what_it_shows(res), "",
             f"Teacher (ALFWorld's handcoded expert, no model), twice: stopped after {t.get('attempt_steps')} steps "
             f"(a failed attempt of every game: {t.get('attempts_solved', 0)} solved), then with its own cap "
             f"(solved {t['solved']} of {t['games']} games). Each game's two memories share its intent; the "
             f"failed attempt is the older one for {t.get('attempt_first', t['games'])} games "
             f"(order {t.get('order', 'history')}). Both students write a memory of every episode.",
             "",
             "## Success rate per epoch (games solved / " + str(n) + ")",
             "",
             "| method | " + " | ".join(f"epoch {e}" for e in range(1, epochs + 1)) + " |",
             "|---|" + "---|" * epochs]
    for m, curve in res.sr.items():
        lines.append(f"| {m} | " + " | ".join(f"{v:.2f} ({round(v * n)})" for v in curve) + " |")
    lines += ["", "## Paired comparison over games (final epoch)", "",
              "Δ = difference of success rates, 95% paired bootstrap interval over games; McNemar: "
              "b = games only the first solved, c = only the second; exact binomial test. "
              f"With no game the other way (c = 0), p < {ALPHA} needs b ≥ {min_discordant()}.", "",
              "| comparison | SR | Δ [95% CI] | b | c | McNemar p |", "|---|---|---|---|---|---|"]
    pw = res.power
    if pw:
        lines.insert(len(lines) - 2, f"{pw['fits']} games have a teacher trajectory that solves them within the "
                     f"student's {pw['max_steps']} steps; the power of MemRL against RAG at this size is in the first "
                     "section (the simulation of docs/experiments.md).\n")
    for r in res.comparisons:
        lines.append(f"| {r['reference']} vs {r['method']} | {r['last_ref']:.2f} vs {r['last_method']:.2f} | "
                     f"{r['delta']:+.2f} [{r['delta_lo']:+.2f}, {r['delta_hi']:+.2f}] | {r['ref_only']} | "
                     f"{r['method_only']} | {r['mcnemar_p']:.3g} |")
    if res.across:
        a = res.across
        lines += ["", f"## {REFERENCE} vs rag across epochs", "",
                  f"CSR-style: per game, solved at least once in epochs 1..{a['epochs']}; the same tests. "
                  "Epochs solved: per game, the number of epochs each method solved it; exact sign test.", "",
                  "| reading | SR | Δ [95% CI] | b | c | p |", "|---|---|---|---|---|---|"]
        for name, key in (("final epoch", "final"), (f"solved at least once (CSR, epochs 1..{a['epochs']})", "csr")):
            r = a[key]
            lines.append(f"| {name} | {r['a']:.2f} vs {r['b_rate']:.2f} | {r['delta']:+.2f} [{r['delta_lo']:+.2f}, "
                         f"{r['delta_hi']:+.2f}] | {r['a_only']} | {r['b_only']} | {r['mcnemar_p']:.3g} |")
        es = a["epochs_solved"]
        lines.append(f"| epochs solved per game (sign test) | | | {es['a_more']} | {es['b_more']} | "
                     f"{es['sign_test_p']:.3g} |")
    if res.mechanism:
        lines += ["", "## The mechanism", "",
                  "Re-injected after a failure: injections, from epoch 2 on, of a memory that an earlier episode "
                  "had already been given and failed with. Own failures shown: per epoch, injections of a memory "
                  "the student wrote after one of its own failed episodes.", "",
                  "| method | re-injected after a failure | own failures shown, per epoch |", "|---|---|---|"]
        for m, row in res.mechanism.items():
            shown = ", ".join(str(v["own_failure"]) for v in row["shown"].values())
            lines.append(f"| {m} | {row['reinjected_after_failure']} of {row['injections_epoch2_on']} | {shown} |")
    lines += ["", "## Copy accuracy", "",
              "Share of steps whose action equals the teacher's action at that step, in episodes given "
              "the same game's teacher memory (`with`), and in the others (`without`: how often the "
              "student picks the teacher's action anyway). Replays: episodes that repeat the teacher's "
              "actions to its end.", "",
              "| method | epoch | with: accuracy (steps, episodes, solved, replays) "
              "| without: accuracy (steps, episodes, solved) |",
              "|---|---|---|---|"]
    for m, per_epoch in res.copy.items():
        for e, rep in per_epoch.items():
            w, o = rep["with_teacher"], rep["without"]
            lines.append(f"| {m} | {e} | {_pct(w['accuracy'])} ({w['steps']}, {w['episodes']}, {w['solved']}, "
                         f"{w['replays']}) | {_pct(o['accuracy'])} ({o['steps']}, {o['episodes']}, {o['solved']}) |")
    used = [q for q in res.q_moves if q["movement"] != "unused"]
    lines += ["", "## Teacher memories under MemRL: Q after the run", "",
              "Each teacher memory started at Q = " + (f"{used[0]['q_start']:g}" if used else "0") +
              "; every episode it was injected into moves it toward +1 (solved) or −1 (failed).", "",
              "| teacher memory (game) | which | teacher solved | Q | movement | student episodes solved / failed |",
              "|---|---|---|---|---|---|"]
    for q in used:
        lines.append(f"| {q['task_id']} | {q.get('label') or '–'} | {'yes' if q['teacher_solved'] else 'no'} | "
                     f"{q['q']:+.2f} | {q['movement']} | {q['used_solved']} / {q['used_failed']} |")
    unused = len(res.q_moves) - len(used)
    if unused:
        lines.append(f"\n{unused} teacher memories were never injected.")
    sp = res.speed.get("run") or {}
    lines += ["", "## Embedded model speed", "",
              f"This demo's student runs: {int(sp.get('calls') or 0)} model calls; prompt tokens evaluated "
              f"{_rate(sp.get('prompt_tokens_per_s'))}/s, of {int(sp.get('prompt_tokens') or 0)} sent "
              f"{_pct(sp.get('reused_share'))} came from the reused prefix "
              f"(= {_rate(sp.get('effective_prompt_tokens_per_s'))} prompt tokens/s sent); decode "
              f"{_rate(sp.get('decode_tokens_per_s'))} tokens/s."]
    bench = res.speed.get("bench")
    if bench:
        off, on = bench["off"], bench["on"]
        lines += ["", f"Same {bench['prompts']} prompts, one process, reuse off then on "
                  f"(outputs identical: {'yes' if bench['identical'] else 'NO'}):", "",
                  "| prefix reuse | prompt tokens evaluated | prompt tokens/s (evaluated) | prompt tokens/s (sent) "
                  "| decode tokens/s | seconds |",
                  "|---|---|---|---|---|---|"]
        for name, s in (("off", off), ("on", on)):
            lines.append(f"| {name} | {s['prompt_tokens_evaluated']} of {s['prompt_tokens']} | "
                         f"{_rate(s['prompt_tokens_per_s'])} | {_rate(s['effective_prompt_tokens_per_s'])} | "
                         f"{_rate(s['decode_tokens_per_s'])} | {s['wall_s']:.1f} |")
    if res.phases:
        lines += ["", "## Wall time", ""] + [f"- {p.name}: {p.seconds:.0f} s" for p in res.phases]
        lines.append(f"- total: {sum(p.seconds for p in res.phases):.0f} s")
    return "\n".join(lines) + "\n"


def plot(res: DemoResult, path: Path) -> Path:
    from memrl.report.figures import _plt, _rate_axis, _save

    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for m, curve in res.sr.items():
        axes[0].plot(range(1, len(curve) + 1), curve, marker="o", label=m)
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("success rate")
    axes[0].set_title(f"SR per epoch ({len(res.games)} games, {res.model})", fontsize=8)
    _rate_axis(axes[0])
    axes[0].legend(fontsize=7)
    given = {m: pe for m, pe in res.copy.items() if any(r["with_teacher"]["episodes"] for r in pe.values())}
    width = 0.8 / max(1, len(given))
    for i, (m, per_epoch) in enumerate(given.items()):
        es = sorted(per_epoch)
        vals = [per_epoch[e]["with_teacher"]["accuracy"] or 0.0 for e in es]
        axes[1].bar([e + (i - (len(given) - 1) / 2) * width for e in es], vals, width, label=m)
    axes[1].set_xlabel("epoch")
    axes[1].set_ylabel("copy accuracy")
    axes[1].set_title("steps equal to the same game's teacher memory (episodes given it)", fontsize=8)
    _rate_axis(axes[1])
    if given:
        axes[1].legend(fontsize=7)
    return _save(fig, path)


def write(res: DemoResult) -> dict[str, Path]:
    from memrl.core.records import write_json_atomic
    from memrl.report import write_report

    out = res.out
    text = render(res)
    files = {"demo.md": out / "demo.md", "demo.json": out / "demo.json", "demo.png": out / "demo.png"}
    files["demo.md"].write_text(text, encoding="utf-8")
    write_json_atomic(files["demo.json"], res.to_dict())
    plot(res, files["demo.png"])
    report_dir = out / "report"
    write_report([out / m for m in res.sr], report_dir, warn=lambda m: None)
    (report_dir / "demo.md").write_text(text, encoding="utf-8")
    plot(res, report_dir / "demo.png")
    files["report"] = report_dir
    return files
