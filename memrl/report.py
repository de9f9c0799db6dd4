"""Tables, figures and statistics across run directories (the paper's Table 1/2, Fig. 5-7).

A run directory is any folder holding both ``run_card.json`` and ``episodes.jsonl``; the
report finds them recursively under the paths it is given (single runs or Hydra multirun
folders). Everything is recomputed from the episode records (`memrl.metrics`).

Grouping. Runs are grouped by (mode, env name, memory name, swept keys). Mode is
``config.runner.mode`` ("train" when absent); transfer runs (``runner.mode == "transfer"``)
only go to Table 2. Swept keys are detected, per (mode, env, memory) family, as the config
keys (flattened, dotted) whose values differ between the family's runs -- e.g.
``memory.lam`` in a λ sweep or ``memory.k1``/``memory.k2`` in a top-k grid -- ignoring
``seed`` and keys that do not change results (cache and data locations, progress bars,
concurrency, logging: `IGNORED_KEYS`, `IGNORED_PREFIXES`). Within a group, runs are the
seeds (``config.seed``); a second run with the same seed in one group is dropped with a
warning (the first by path order is kept).

Epochs. A run whose last epoch is incomplete (still running, or killed) is cut back to its
last complete epoch; a cell missing inside the kept range counts as a failure. Both are
reported as warnings.

Statistics.
- Across seeds (Table 1, Table 2, every curve and the λ / α / top-k figures): the mean over
  seeds and a 95% Student-t interval, mean ± t(0.975, n-1)·s/√n with s the sample standard
  deviation of the per-seed values. One seed gives no interval (blank in CSV, "–" in
  Markdown). Intervals are not clipped to [0, 1].
- Method vs MemRL (comparisons): on the tasks both groups have, final-epoch success is
  averaged over each group's seeds per task; ``delta`` = MemRL − method of those per-task
  means (= the difference of the Last values on the common tasks). Its 95% interval is a
  percentile bootstrap that resamples tasks with replacement (``n_boot`` draws, numpy
  ``default_rng(seed)``), keeping each task's two values together (paired).
- McNemar's test on final-epoch success: the pairs are (task, seed) for the seeds both
  groups have (if they share no seed, seeds are paired in sorted order and the row says
  so). b = MemRL solved and the method did not, c = the reverse. Two-sided exact binomial
  test (p = min(1, 2·P[X ≤ min(b, c)]), X ~ Bin(b + c, 1/2)) when b + c < 25, else the
  χ² statistic with continuity correction, (|b − c| − 1)² / (b + c), 1 degree of freedom.
  Pooling several seeds treats a task's seeds as independent pairs; with one seed it is
  the textbook test.

Q-value figures (MemRL runs, memory name ``memrl``).
- Calibration (paper Fig. 7): each episode that had memories injected is placed by the mean
  Q of those memories (``injected[].q`` in ``episodes.jsonl``: Q at retrieval time, before
  that episode's update); 10 equal-width bins over [min(-1, lowest Q), max(1, highest Q)];
  the success rate per bin, pooled over the group's seeds and all epochs. Episodes with no
  memory injected are a separate row ("none").
- Histograms per epoch: the distribution of the injected memories' Q per epoch (one value
  per injected memory per episode), i.e. the utilities of memories actually used -- not of
  the whole bank, which is not recorded per epoch.

Transfer (Table 2): per run, the success rate per epoch of the held-out evaluation that
follows each training epoch (``eval_episodes.jsonl``, as `memrl.metrics.transfer_metrics`
reads it; failing that, records of ``episodes.jsonl`` whose ``info.phase`` is one of
"valid", "val", "eval", "test"); its best over epochs, then mean and t-interval over seeds.

CLI: ``python scripts/report.py RUN_OR_MULTIRUN_DIR... --out DIR``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from memrl.metrics import EPISODES_FILE, EVAL_EPISODES_FILE, csr_curve, forgetting_curve, sr_curve, success_matrix
from memrl.records import EpisodeRecord, read_episodes

RUN_CARD_FILE = "run_card.json"
REFERENCE = "memrl"
LEVEL = 0.95
EXACT_BELOW = 25  # McNemar: exact binomial when b + c < this
Q_BINS = 10
EVAL_PHASES = {"valid", "val", "eval", "test"}

# Config keys that never distinguish two experiments (locations, UI, resources, logging).
IGNORED_KEYS = {
    "seed", "runner.progress", "runner.metrics_every_epoch", "runner.mode",
    "env.name", "memory.name",
    "llm.max_concurrency", "llm.max_retries", "llm.timeout", "llm.cache_path", "llm.cache",
    "llm.n_threads", "llm.reuse_prefix", "llm.prefix_block", "embedder.cache_path", "embedder.cache", "env.cache_dir", "env.data_root",
    "memory.bank.host", "memory.bank.port", "memory.bank.collection",
}
IGNORED_PREFIXES = ("paths.", "hydra.", "logger.", "local.")

# Swept keys with a figure of their own: key -> output stem.
PARAM_FIGURES = {"memory.lam": "lambda", "memory.alpha": "alpha"}
TOPK_KEYS = ("memory.k1", "memory.k2")


# --------------------------------------------------------------------------- statistics
# Two-sided 95% Student-t quantiles t(0.975, df), used only when scipy is unavailable.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
         16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
         40: 2.021, 60: 2.000, 120: 1.980}


def t_quantile(p: float, df: int) -> float:
    """Quantile p of Student's t with df degrees of freedom."""
    try:
        from scipy.stats import t as student_t
    except ImportError:  # pragma: no cover - scipy ships with the default install
        if abs(p - 0.975) > 1e-12:
            raise RuntimeError("t quantiles other than 0.975 need scipy") from None
        known = [d for d in sorted(_T975) if d <= df]
        return _T975[known[-1]] if df <= 120 else 1.960
    return float(student_t.ppf(p, df))


def t_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean; NaN bounds for fewer than 2 values."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    m = float(x.mean())
    if x.size < 2:
        return m, math.nan, math.nan
    half = t_quantile(0.5 + level / 2, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return m, m - half, m + half


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000,
                     seed: int = 0, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean(a - b), low, high): percentile bootstrap over paired units (here: tasks)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.ndim != 1 or d.size == 0:
        raise ValueError("paired_bootstrap needs two equal-length, non-empty sequences")
    est = float(d.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // d.size)
    for start in range(0, n_boot, chunk):
        n = min(chunk, n_boot - start)
        means[start:start + n] = d[rng.integers(0, d.size, size=(n, d.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return est, float(lo), float(hi)


def mcnemar(b: int, c: int, exact_below: int = EXACT_BELOW) -> dict[str, Any]:
    """McNemar's test on discordant counts b and c (two-sided)."""
    b, c = int(b), int(c)
    n = b + c
    if n == 0:
        return {"b": b, "c": c, "n_discordant": 0, "test": "exact", "statistic": math.nan, "p": 1.0}
    if n < exact_below:
        k = min(b, c)
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
        return {"b": b, "c": c, "n_discordant": n, "test": "exact",
                "statistic": float(k), "p": min(1.0, 2 * tail)}
    stat = (abs(b - c) - 1) ** 2 / n
    # χ² with 1 degree of freedom: P[X > x] = erfc(sqrt(x / 2))
    return {"b": b, "c": c, "n_discordant": n, "test": "chi2-cc",
            "statistic": stat, "p": math.erfc(math.sqrt(stat / 2))}


# --------------------------------------------------------------------------- runs
@dataclass
class Run:
    path: Path
    config: dict[str, Any]
    records: list[EpisodeRecord]
    task_ids: list[str]
    epochs: list[int]
    S: np.ndarray  # (E, N) success matrix over complete epochs
    warnings: list[str] = field(default_factory=list)
    eval_records: list[EpisodeRecord] = field(default_factory=list)  # transfer evaluation

    @property
    def env(self) -> str:
        return str((self.config.get("env") or {}).get("name", "?"))

    @property
    def memory(self) -> str:
        return str((self.config.get("memory") or {}).get("name", "?"))

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0) or 0)

    @property
    def mode(self) -> str:
        return str((self.config.get("runner") or {}).get("mode") or "train")

    def final(self) -> dict[str, int]:
        """Final-epoch success per task id."""
        return {t: int(v) for t, v in zip(self.task_ids, self.S[-1])}


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Every directory at or below `paths` holding run_card.json and episodes.jsonl."""
    found: set[Path] = set()
    for p in paths:
        p = Path(p)
        cards = [p / RUN_CARD_FILE] if (p / RUN_CARD_FILE).is_file() else []
        if p.is_dir():
            cards += list(p.rglob(RUN_CARD_FILE))
        for card in cards:
            if (card.parent / EPISODES_FILE).is_file():
                found.add(card.parent.resolve())
    return sorted(found)


def complete_matrix(records: Sequence[EpisodeRecord]) -> tuple[list[str], list[int], np.ndarray, list[str]]:
    """Success matrix over complete epochs: trailing incomplete epochs are dropped, a cell
    missing inside the kept range counts as a failure. Returns (tasks, epochs, S, warnings)."""
    task_ids, epochs, S = success_matrix(records, allow_missing=True)
    present = {(r.task_id, int(r.epoch)) for r in records}
    full = [all((t, e) in present for t in task_ids) for e in epochs]
    keep = len(epochs)
    while keep > 0 and not full[keep - 1]:
        keep -= 1
    notes = []
    if keep == 0:
        keep = 1  # nothing complete: keep epoch 1, missing cells as failures
        notes.append("no complete epoch; missing cells of epoch 1 count as failures")
    elif keep < len(epochs):
        notes.append(f"epochs {epochs[keep]}..{epochs[-1]} incomplete: cut back to epoch {epochs[keep - 1]}")
    gaps = sum(1 for e in epochs[:keep] for t in task_ids if (t, e) not in present)
    if gaps and keep > 1:
        notes.append(f"{gaps} missing (task, epoch) cells count as failures")
    return task_ids, epochs[:keep], S[:keep], notes


def load_run(path: str | Path) -> Run | None:
    """A Run, or None when the directory has no episode yet."""
    path = Path(path)
    card = json.loads((path / RUN_CARD_FILE).read_text(encoding="utf-8"))
    records = read_episodes(path / EPISODES_FILE)
    evals = read_episodes(path / EVAL_EPISODES_FILE) if (path / EVAL_EPISODES_FILE).is_file() else []
    for r in records + evals:  # the report never reads transcripts: free them
        r.transcript = []
    if not records:
        return None
    task_ids, epochs, S, notes = complete_matrix(records)
    return Run(path=path, config=card.get("config") or {}, records=records, task_ids=task_ids,
               epochs=epochs, S=S, warnings=notes, eval_records=evals)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _ignored(key: str) -> bool:
    return key in IGNORED_KEYS or key.startswith(IGNORED_PREFIXES)


def _hashable(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def swept_keys(configs: Sequence[dict[str, Any]]) -> list[str]:
    """Dotted config keys whose values differ between the configs (ignoring `IGNORED_*`)."""
    flat = [flatten(c) for c in configs]
    keys = sorted({k for f in flat for k in f})
    return [k for k in keys if not _ignored(k) and len({_hashable(f.get(k)) for f in flat}) > 1]


@dataclass
class Group:
    mode: str
    env: str
    memory: str
    params: tuple[tuple[str, Any], ...]  # swept key -> value, sorted by key
    runs: list[Run]  # sorted by seed

    @property
    def label(self) -> str:
        if not self.params:
            return self.memory
        inner = ", ".join(f"{short_key(k)}={_fmt_value(v)}" for k, v in self.params)
        return f"{self.memory} ({inner})"

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    def param(self, key: str) -> Any:
        return dict(self.params).get(key)

    def n_tasks(self) -> str:
        ns = sorted({len(r.task_ids) for r in self.runs})
        return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"

    def per_seed(self, fn: Callable[[Run], float | None]) -> list[float]:
        return [v for v in (fn(r) for r in self.runs) if v is not None]


def short_key(key: str) -> str:
    return key.removeprefix("memory.")


def _fmt_value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def group_runs(runs: Sequence[Run], warn: Callable[[str], None] = print) -> list[Group]:
    families: dict[tuple[str, str, str], list[Run]] = defaultdict(list)
    for r in runs:
        families[(r.mode, r.env, r.memory)].append(r)
    groups: list[Group] = []
    for (mode, env, memory), fam in sorted(families.items()):
        keys = swept_keys([r.config for r in fam])
        by_params: dict[str, list[Run]] = defaultdict(list)
        params_of: dict[str, tuple[tuple[str, Any], ...]] = {}
        for r in fam:
            flat = flatten(r.config)
            params = tuple((k, flat.get(k)) for k in keys)
            h = _hashable(params)
            by_params[h].append(r)
            params_of[h] = params
        for h, members in by_params.items():
            kept: dict[int, Run] = {}
            for r in sorted(members, key=lambda r: str(r.path)):
                if r.seed in kept:
                    warn(f"warning: {r.path}: same group and seed as {kept[r.seed].path}; ignored")
                    continue
                kept[r.seed] = r
            groups.append(Group(mode, env, memory, params_of[h], [kept[s] for s in sorted(kept)]))
    groups.sort(key=lambda g: (g.mode, g.env, g.memory != REFERENCE, g.memory,
                               [(k, _sort_value(v)) for k, v in g.params]))
    return groups


def _sort_value(v: Any) -> tuple[int, float, str]:
    if isinstance(v, bool) or v is None:
        return (1, 0.0, str(v))
    if isinstance(v, (int, float)):
        return (0, float(v), "")
    return (1, 0.0, _hashable(v))


# --------------------------------------------------------------------------- tables
def _last(r: Run) -> float:
    return sr_curve(r.S)[-1]


def _csr(r: Run) -> float:
    return csr_curve(r.S)[-1]


def _fr_mean(r: Run) -> float | None:
    fr = forgetting_curve(r.S)
    return float(np.mean(fr)) if fr else None


def table1_rows(groups: Sequence[Group]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        if g.mode == "transfer":
            continue
        last_m, last_lo, last_hi = t_interval(g.per_seed(_last))
        csr_m, csr_lo, csr_hi = t_interval(g.per_seed(_csr))
        fr_m, fr_lo, fr_hi = t_interval(g.per_seed(_fr_mean))
        rows.append({
            "benchmark": g.env, "method": g.label, "memory": g.memory,
            "params": json.dumps(dict(g.params), sort_keys=True) if g.params else "",
            "n_tasks": g.n_tasks(), "n_seeds": len(g.runs), "seeds": " ".join(map(str, g.seeds)),
            "epochs": min(len(r.epochs) for r in g.runs),
            "last_mean": last_m, "last_lo": last_lo, "last_hi": last_hi,
            "csr_mean": csr_m, "csr_lo": csr_lo, "csr_hi": csr_hi,
            "forgetting_mean": fr_m, "forgetting_lo": fr_lo, "forgetting_hi": fr_hi,
        })
    return rows


def _final_by_seed(g: Group, tasks: Sequence[str]) -> dict[int, np.ndarray]:
    out = {}
    for r in g.runs:
        final = r.final()
        out[r.seed] = np.array([final[t] for t in tasks], dtype=float)
    return out


def compare(ref: Group, other: Group, *, n_boot: int = 10_000, seed: int = 0) -> dict[str, Any] | None:
    """MemRL (ref) vs another method on their common tasks; None if they share no task."""
    tasks = sorted(set.intersection(*(set(r.task_ids) for r in ref.runs + other.runs)))
    if not tasks:
        return None
    ref_f, oth_f = _final_by_seed(ref, tasks), _final_by_seed(other, tasks)
    ref_mean = np.mean(list(ref_f.values()), axis=0)
    oth_mean = np.mean(list(oth_f.values()), axis=0)
    est, lo, hi = paired_bootstrap(ref_mean, oth_mean, n_boot=n_boot, seed=seed)
    common = sorted(set(ref_f) & set(oth_f))
    if common:
        pairs, pairing = [(s, s) for s in common], "same seed"
    else:
        pairs, pairing = list(zip(sorted(ref_f), sorted(oth_f))), "seeds in sorted order"
    b = c = n11 = n00 = 0
    for rs, os_ in pairs:
        x, y = ref_f[rs].astype(bool), oth_f[os_].astype(bool)
        b += int((x & ~y).sum())
        c += int((~x & y).sum())
        n11 += int((x & y).sum())
        n00 += int((~x & ~y).sum())
    test = mcnemar(b, c)
    return {
        "benchmark": ref.env, "reference": ref.label, "method": other.label,
        "n_tasks": len(tasks), "n_seeds_ref": len(ref.runs), "n_seeds_method": len(other.runs),
        "last_ref": float(ref_mean.mean()), "last_method": float(oth_mean.mean()),
        "delta": est, "delta_lo": lo, "delta_hi": hi, "n_boot": n_boot, "boot_seed": seed,
        "pairs": len(pairs) * len(tasks), "pairing": pairing,
        "both_solved": n11, "ref_only": b, "method_only": c, "neither": n00,
        "mcnemar_test": test["test"], "mcnemar_statistic": test["statistic"], "mcnemar_p": test["p"],
    }


def comparison_rows(groups: Sequence[Group], *, reference: str = REFERENCE, n_boot: int = 10_000,
                    seed: int = 0) -> list[dict[str, Any]]:
    rows = []
    train = [g for g in groups if g.mode != "transfer"]
    for ref in (g for g in train if g.memory == reference):
        for other in (g for g in train if g.env == ref.env and g.memory != reference):
            row = compare(ref, other, n_boot=n_boot, seed=seed)
            if row is not None:
                rows.append(row)
    return rows


def eval_matrix(run: Run) -> np.ndarray | None:
    """Success matrix of a transfer run's held-out evaluation (see module doc), or None."""
    recs = run.eval_records
    if not recs:
        recs = run.records
        if any("phase" in (r.info or {}) for r in recs):
            recs = [r for r in recs if str((r.info or {}).get("phase")) in EVAL_PHASES]
    return complete_matrix(recs)[2] if recs else None


def eval_sr_curve(run: Run) -> list[float]:
    """SR per epoch of a transfer run's held-out evaluation ([] when there is none)."""
    S = eval_matrix(run)
    return sr_curve(S) if S is not None else []


def table2_rows(groups: Sequence[Group]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        if g.mode != "transfer":
            continue
        mats = [S for S in (eval_matrix(r) for r in g.runs) if S is not None]
        if not mats:
            continue
        curves = [sr_curve(S) for S in mats]
        ns = sorted({int(S.shape[1]) for S in mats})
        best_m, best_lo, best_hi = t_interval([max(c) for c in curves])
        rows.append({
            "benchmark": g.env, "method": g.label, "memory": g.memory,
            "n_tasks": str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}",
            "n_seeds": len(curves), "seeds": " ".join(map(str, g.seeds)),
            "best_epoch_mean": float(np.mean([int(np.argmax(c)) + 1 for c in curves])),  # first best
            "best_sr_mean": best_m, "best_sr_lo": best_lo, "best_sr_hi": best_hi,
        })
    return rows


def fmt_ci(m: float, lo: float, hi: float, digits: int = 3) -> str:
    if m is None or (isinstance(m, float) and math.isnan(m)):
        return "–"
    if math.isnan(lo):
        return f"{m:.{digits}f} [–]"
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|")
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def table1_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# Table 1: Last and CSR\n\n"
            "Mean over seeds with a 95% Student-t interval across seeds ([–]: one seed). "
            "Last = success rate of the final epoch; CSR = fraction of tasks solved at least once; "
            "forgetting = mean forgetting rate over epochs 2..E.\n\n")
    body = markdown_table(
        ["benchmark", "method", "n tasks", "seeds", "epochs", "Last", "CSR", "forgetting"],
        [[r["benchmark"], r["method"], r["n_tasks"], r["n_seeds"], r["epochs"],
          fmt_ci(r["last_mean"], r["last_lo"], r["last_hi"]),
          fmt_ci(r["csr_mean"], r["csr_lo"], r["csr_hi"]),
          fmt_ci(r["forgetting_mean"], r["forgetting_lo"], r["forgetting_hi"])] for r in rows])
    return head + body


def comparisons_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# MemRL vs each method: final-epoch success on common tasks\n\n"
            "Δ = MemRL − method (mean over tasks of each task's seed-averaged final success), "
            "95% paired bootstrap over tasks. McNemar over (task, seed) pairs: "
            "b = only MemRL solved, c = only the method solved; exact binomial when b + c < "
            f"{EXACT_BELOW}, else χ² with continuity correction.\n\n")
    body = markdown_table(
        ["benchmark", "reference", "method", "n tasks", "Last ref", "Last method", "Δ [95% CI]",
         "b", "c", "test", "p"],
        [[r["benchmark"], r["reference"], r["method"], r["n_tasks"], f"{r['last_ref']:.3f}",
          f"{r['last_method']:.3f}", fmt_ci(r["delta"], r["delta_lo"], r["delta_hi"]),
          r["ref_only"], r["method_only"], r["mcnemar_test"], f"{r['mcnemar_p']:.4g}"] for r in rows])
    return head + body


def table2_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# Table 2: transfer (frozen bank, held-out split)\n\n"
            "Best validation success rate across epochs: mean over seeds with a 95% "
            "Student-t interval across seeds.\n\n")
    body = markdown_table(
        ["benchmark", "method", "n tasks", "seeds", "best SR", "best epoch (mean)"],
        [[r["benchmark"], r["method"], r["n_tasks"], r["n_seeds"],
          fmt_ci(r["best_sr_mean"], r["best_sr_lo"], r["best_sr_hi"]),
          f"{r['best_epoch_mean']:.1f}"] for r in rows])
    return head + body


def write_csv(path: Path, rows: Sequence[dict[str, Any]], fields: Sequence[str] | None = None) -> Path:
    fields = list(fields or (rows[0].keys() if rows else []))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: _csv_value(r.get(k)) for k in fields})
    return path


def _csv_value(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return ""
    return v


# --------------------------------------------------------------------------- curves
def curve_band(g: Group, fn: Callable[[np.ndarray], list[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-epoch mean, low, high over seeds (curves cut to the shortest run)."""
    curves = [fn(r.S) for r in g.runs]
    n = min(len(c) for c in curves)
    if n == 0:
        return np.array([]), np.array([]), np.array([])
    arr = np.array([c[:n] for c in curves], dtype=float)
    stats = np.array([t_interval(arr[:, j]) for j in range(n)])
    return stats[:, 0], stats[:, 1], stats[:, 2]


def param_rows(groups: Sequence[Group], key: str) -> list[dict[str, Any]]:
    """Final SR (Last) and CSR against one swept key, per (env, memory, other swept keys)."""
    rows = []
    for g in groups:
        if g.mode == "transfer" or key not in dict(g.params):
            continue
        others = {k: v for k, v in g.params if k != key}
        last_m, last_lo, last_hi = t_interval(g.per_seed(_last))
        csr_m, csr_lo, csr_hi = t_interval(g.per_seed(_csr))
        rows.append({"benchmark": g.env, "memory": g.memory,
                     "other": ", ".join(f"{short_key(k)}={_fmt_value(v)}" for k, v in others.items()),
                     short_key(key): g.param(key), "n_tasks": g.n_tasks(), "n_seeds": len(g.runs),
                     "last_mean": last_m, "last_lo": last_lo, "last_hi": last_hi,
                     "csr_mean": csr_m, "csr_lo": csr_lo, "csr_hi": csr_hi})
    series: dict[tuple, set] = defaultdict(set)
    for r in rows:
        series[(r["benchmark"], r["memory"], r["other"])].add(_hashable(r[short_key(key)]))
    rows = [r for r in rows if len(series[(r["benchmark"], r["memory"], r["other"])]) > 1]
    rows.sort(key=lambda r: (r["benchmark"], r["memory"], r["other"], _sort_value(r[short_key(key)])))
    return rows


def topk_rows(groups: Sequence[Group]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        p = dict(g.params)
        if g.mode == "transfer" or not any(k in p for k in TOPK_KEYS):
            continue
        flat = flatten(g.runs[0].config)
        k1, k2 = (p.get(k, flat.get(k)) for k in TOPK_KEYS)
        others = {k: v for k, v in g.params if k not in TOPK_KEYS}
        last_m, last_lo, last_hi = t_interval(g.per_seed(_last))
        csr_m, csr_lo, csr_hi = t_interval(g.per_seed(_csr))
        rows.append({"benchmark": g.env, "memory": g.memory,
                     "other": ", ".join(f"{short_key(k)}={_fmt_value(v)}" for k, v in others.items()),
                     "k1": k1, "k2": k2, "n_tasks": g.n_tasks(), "n_seeds": len(g.runs),
                     "last_mean": last_m, "last_lo": last_lo, "last_hi": last_hi,
                     "csr_mean": csr_m, "csr_lo": csr_lo, "csr_hi": csr_hi})
    rows.sort(key=lambda r: (r["benchmark"], r["memory"], r["other"], _sort_value(r["k1"]), _sort_value(r["k2"])))
    return rows


def q_bins(values: Sequence[float], n_bins: int = Q_BINS) -> np.ndarray:
    lo = min(-1.0, min(values)) if len(values) else -1.0
    hi = max(1.0, max(values)) if len(values) else 1.0
    return np.linspace(lo, hi, n_bins + 1)


def _bin_index(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin i holds edges[i] <= v < edges[i+1]; the top edge belongs to the last bin."""
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)


def _mean_q(rec: EpisodeRecord) -> float | None:
    qs = [m.get("q") for m in rec.injected or [] if isinstance(m, dict) and m.get("q") is not None]
    return float(np.mean(qs)) if qs else None


def q_calibration_rows(groups: Sequence[Group], *, reference: str = REFERENCE,
                       n_bins: int = Q_BINS) -> list[dict[str, Any]]:
    """Success rate of episodes binned by the mean Q of their injected memories."""
    mem = [g for g in groups if g.memory == reference and g.mode != "transfer"]
    all_q = [q for g in mem for r in g.runs for rec in r.records if (q := _mean_q(rec)) is not None]
    edges = q_bins(all_q, n_bins)
    rows = []
    for g in mem:
        qs, ok, none_n, none_ok = [], [], 0, 0
        for r in g.runs:
            for rec in r.records:
                q = _mean_q(rec)
                if q is None:
                    none_n += 1
                    none_ok += int(bool(rec.success))
                else:
                    qs.append(q)
                    ok.append(int(bool(rec.success)))
        idx = _bin_index(np.array(qs, dtype=float), edges) if qs else np.array([], dtype=int)
        okv = np.array(ok, dtype=int)
        for i in range(n_bins):
            sel = idx == i
            n = int(sel.sum())
            rows.append({"benchmark": g.env, "method": g.label, "bin": i,
                         "q_lo": float(edges[i]), "q_hi": float(edges[i + 1]),
                         "n_episodes": n, "n_success": int(okv[sel].sum()) if n else 0,
                         "success_rate": float(okv[sel].mean()) if n else math.nan})
        rows.append({"benchmark": g.env, "method": g.label, "bin": "none", "q_lo": math.nan,
                     "q_hi": math.nan, "n_episodes": none_n, "n_success": none_ok,
                     "success_rate": none_ok / none_n if none_n else math.nan})
    return rows


def injected_q_by_epoch(run: Run) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for rec in run.records:
        for m in rec.injected or []:
            if isinstance(m, dict) and m.get("q") is not None:
                out[int(rec.epoch)].append(float(m["q"]))
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------- figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", s).strip("_") or "x"


def _rate_axis(ax: Any, integer_x: bool = True) -> None:
    """Rates live in [0, 1]: fixed y range (t-intervals wider than that are cut by the frame)."""
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig: Any, path: Path) -> Path:
    plt = _plt()
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def plot_curves(groups: Sequence[Group], env: str, path: Path) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for g in groups:
        for ax, fn in zip(axes, (sr_curve, csr_curve)):
            m, lo, hi = curve_band(g, fn)
            x = np.arange(1, len(m) + 1)
            line, = ax.plot(x, m, marker="o", label=f"{g.label} (n={len(g.runs)})")
            if len(g.runs) > 1:
                ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
    n = ", ".join(sorted({g.n_tasks() for g in groups}))
    for ax, name in zip(axes, ("SR", "CSR")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.set_title(f"{env}: {name} per epoch ({n} tasks; mean, 95% t-interval over seeds)", fontsize=8)
        _rate_axis(ax)
    axes[1].legend(fontsize=7)
    return _save(fig, path)


def plot_forgetting(groups: Sequence[Group], env: str, path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for g in groups:
        m, lo, hi = curve_band(g, forgetting_curve)
        if len(m) == 0:
            continue
        x = np.arange(2, len(m) + 2)
        line, = ax.plot(x, m, marker="o", label=f"{g.label} (n={len(g.runs)})")
        if len(g.runs) > 1:
            ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
    ax.set_xlabel("epoch")
    ax.set_ylabel("forgetting rate")
    ax.set_title(f"{env}: forgetting rate (mean, 95% t-interval over seeds)", fontsize=8)
    _rate_axis(ax)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return _save(fig, path)


def _errbar(m: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    lo = np.where(np.isnan(lo), m, lo)
    hi = np.where(np.isnan(hi), m, hi)
    return np.vstack([m - lo, hi - m])


def plot_param(rows: Sequence[dict[str, Any]], key: str, path: Path) -> Path:
    plt = _plt()
    col = short_key(key)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    series: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        series[(r["benchmark"], r["memory"], r["other"])].append(r)
    for (env, memory, other), rs in series.items():
        x = np.array([float(r[col]) for r in rs])
        label = f"{env} / {memory}" + (f" ({other})" if other else "")
        for ax, name in zip(axes, ("last", "csr")):
            m = np.array([r[f"{name}_mean"] for r in rs])
            lo = np.array([r[f"{name}_lo"] for r in rs])
            hi = np.array([r[f"{name}_hi"] for r in rs])
            ax.errorbar(x, m, yerr=_errbar(m, lo, hi), marker="o", capsize=3, label=label)
    for ax, name in zip(axes, ("final SR (Last)", "CSR")):
        ax.set_xlabel(col)
        ax.set_ylabel(name)
        ax.set_title(f"{name} vs {col} (mean, 95% t-interval over seeds)", fontsize=8)
        _rate_axis(ax, integer_x=False)
    axes[1].legend(fontsize=7)
    return _save(fig, path)


def plot_topk(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    plt = _plt()
    panels: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        panels[(r["benchmark"], r["memory"], r["other"])].append(r)
    fig, axes = plt.subplots(len(panels), 2, figsize=(10, 3.8 * len(panels)), squeeze=False)
    for row_axes, ((env, memory, other), rs) in zip(axes, panels.items()):
        k1s = sorted({r["k1"] for r in rs}, key=_sort_value)
        k2s = sorted({r["k2"] for r in rs}, key=_sort_value)
        for ax, name in zip(row_axes, ("last", "csr")):
            grid = np.full((len(k1s), len(k2s)), np.nan)
            for r in rs:
                grid[k1s.index(r["k1"]), k2s.index(r["k2"])] = r[f"{name}_mean"]
            im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
            for i in range(len(k1s)):
                for j in range(len(k2s)):
                    if not np.isnan(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center",
                                color="white" if grid[i, j] < 0.5 else "black", fontsize=8)
            ax.set_xticks(range(len(k2s)), [str(k) for k in k2s])
            ax.set_yticks(range(len(k1s)), [str(k) for k in k1s])
            ax.set_xlabel("k2 (injected)")
            ax.set_ylabel("k1 (candidates)")
            title = f"{env} / {memory}" + (f" ({other})" if other else "")
            ax.set_title(f"{title}: {'Last' if name == 'last' else 'CSR'} (mean over seeds)", fontsize=8)
            fig.colorbar(im, ax=ax)
    return _save(fig, path)


def plot_q_calibration(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    series: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["bin"] != "none" and r["n_episodes"]:
            series[(r["benchmark"], r["method"])].append(r)
    for (env, method), rs in series.items():
        x = [(r["q_lo"] + r["q_hi"]) / 2 for r in rs]
        y = [r["success_rate"] for r in rs]
        ax.plot(x, y, marker="o", label=f"{env} / {method} ({sum(r['n_episodes'] for r in rs)} episodes)")
    ax.set_xlabel("mean Q of the injected memories (bin centre)")
    ax.set_ylabel("episode success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Q calibration: success rate by retrieved utility", fontsize=8)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_q_hist(run: Run, title: str, path: Path) -> Path:
    plt = _plt()
    by_epoch = injected_q_by_epoch(run)
    values = [q for qs in by_epoch.values() for q in qs]
    edges = q_bins(values, 20)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for epoch, qs in by_epoch.items():
        ax.hist(qs, bins=edges, histtype="step", linewidth=1.5, label=f"epoch {epoch} ({len(qs)})")
    ax.set_xlabel("Q of injected memories (before the episode's update)")
    ax.set_ylabel("count")
    ax.set_title(title, fontsize=8)
    ax.grid(True, alpha=0.3)
    if by_epoch:
        ax.legend(fontsize=7)
    return _save(fig, path)


# --------------------------------------------------------------------------- report
def build_report(paths: Sequence[str | Path], out: str | Path, *, n_boot: int = 10_000,
                 seed: int = 0, reference: str = REFERENCE,
                 warn: Callable[[str], None] = print) -> dict[str, Path]:
    """Write every table and figure into `out`; returns {name: path} of the files written."""
    out = Path(out)
    run_dirs = find_runs(paths)
    if not run_dirs:
        raise FileNotFoundError("no run directory (run_card.json + episodes.jsonl) under "
                                + ", ".join(map(str, paths)))
    runs = []
    for d in run_dirs:
        r = load_run(d)
        if r is None:
            warn(f"warning: {d}: no episodes yet; skipped")
            continue
        for w in r.warnings:
            warn(f"warning: {d}: {w}")
        runs.append(r)
    if not runs:
        raise FileNotFoundError("run directories found, but none has an episode yet")
    groups = group_runs(runs, warn=warn)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def put(name: str, path: Path) -> None:
        files[name] = path

    t1 = table1_rows(groups)
    if t1:
        (out / "table1.md").write_text(table1_markdown(t1), encoding="utf-8")
        put("table1.md", out / "table1.md")
        put("table1.csv", write_csv(out / "table1.csv", t1))
    comp = comparison_rows(groups, reference=reference, n_boot=n_boot, seed=seed)
    if comp:
        (out / "comparisons.md").write_text(comparisons_markdown(comp), encoding="utf-8")
        put("comparisons.md", out / "comparisons.md")
        put("comparisons.csv", write_csv(out / "comparisons.csv", comp))
    t2 = table2_rows(groups)
    if t2:
        (out / "table2.md").write_text(table2_markdown(t2), encoding="utf-8")
        put("table2.md", out / "table2.md")
        put("table2.csv", write_csv(out / "table2.csv", t2))

    train = [g for g in groups if g.mode != "transfer"]
    for env in sorted({g.env for g in train}):
        gs = [g for g in train if g.env == env]
        name = f"curves_{safe_name(env)}.png"
        put(name, plot_curves(gs, env, out / name))
        name = f"forgetting_{safe_name(env)}.png"
        put(name, plot_forgetting(gs, env, out / name))

    for key, stem in PARAM_FIGURES.items():
        rows = param_rows(groups, key)
        if rows:
            put(f"{stem}.csv", write_csv(out / f"{stem}.csv", rows))
            put(f"{stem}.png", plot_param(rows, key, out / f"{stem}.png"))
    rows = topk_rows(groups)
    if len({(r["k1"], r["k2"]) for r in rows}) > 1:
        put("topk_grid.csv", write_csv(out / "topk_grid.csv", rows))
        put("topk_grid.png", plot_topk(rows, out / "topk_grid.png"))

    qrows = q_calibration_rows(groups, reference=reference)
    if any(r["bin"] != "none" and r["n_episodes"] for r in qrows):
        put("q_calibration.csv", write_csv(out / "q_calibration.csv", qrows))
        put("q_calibration.png", plot_q_calibration(qrows, out / "q_calibration.png"))
    used: set[str] = set()
    for g in train:
        if g.memory != reference:
            continue
        for r in g.runs:
            if not injected_q_by_epoch(r):
                continue
            stem = safe_name(f"{g.env}_{g.label}_seed{r.seed}")
            base, i = stem, 1
            while stem in used:
                i += 1
                stem = f"{base}_{i}"
            used.add(stem)
            name = f"q_hist_{stem}.png"
            put(name, plot_q_hist(r, f"{g.env} / {g.label} / seed {r.seed}: injected Q per epoch", out / name))

    summary = {"runs": [str(r.path) for r in runs], "n_boot": n_boot, "boot_seed": seed,
               "reference": reference,
               "groups": [{"mode": g.mode, "benchmark": g.env, "method": g.label,
                           "params": dict(g.params), "seeds": g.seeds,
                           "runs": [str(r.path) for r in g.runs]} for g in groups]}
    (out / "report.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    put("report.json", out / "report.json")
    return files


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python scripts/report.py",
        description="Tables and figures from run directories (found recursively).")
    ap.add_argument("paths", nargs="+", type=Path, help="run directories or folders holding them")
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--n-boot", type=int, default=10_000, help="bootstrap draws (default 10000)")
    ap.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    ap.add_argument("--reference", default=REFERENCE, help="memory name compared against (default memrl)")
    args = ap.parse_args(argv)
    try:
        files = build_report(args.paths, args.out, n_boot=args.n_boot, seed=args.seed,
                             reference=args.reference, warn=lambda m: print(m, file=sys.stderr))
    except (FileNotFoundError, ValueError) as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {args.out}:")
    for name, path in files.items():
        print(f"  {name:<28} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
