"""A plan before spending: `python -m memrl.cli plan [OPTIONS] <the same overrides as a run>`.

For each run of the command (a sweep with `-m`/`--multirun` expands to its runs, as Hydra's
basic sweeper does: the product of the comma-separated values) it prints tasks x epochs,
the expected model requests, prompt and completion tokens, cost, and wall time at the
configured concurrency.

Where the figures come from:

- a pilot (default): the same run on the first `--pilot-tasks` tasks (4) for one epoch,
  made by `python -m memrl.cli run` into `--pilot-dir` (runs/.plan/<run>) with the run's own
  settings and response cache. Its answers are cached, so the real run's first episodes
  (the same tasks, in the same order, on the same empty bank) are cache hits: the pilot is
  paid once. A memory method whose pilot saw no memory injected (its bank was still empty,
  e.g. pilot tasks <= batch size) plays a second pilot epoch on the same tasks to see how
  large its injections are (`runner.epochs` is an extent: the pilot directory continues);
- or an existing run (`--from RUN_DIR`: its episode records and run card), no model call.

The model, per episode (means over the pilot's first epoch): `calls` model requests,
`completion` tokens per call, and prompt tokens per call = base + injected characters /
`--chars-per-token` (4). Injected characters per episode: the pilot's mean in epoch 1 for
the share of epoch 1 the pilot covered, and, once the bank holds memories, the mean size of
an injected memory (records carry each one's `chars`) times the most memories the pilot saw
injected at once. Completion tokens include a reasoning model's hidden reasoning (the pilot
measures them; they are also shown apart), and every billed try of a call (an empty reply
that was retried) is in the pilot's records. Cost: the model's prices (memrl.llm.profile:
the config's, else litellm's list), twice: with the share of prompt tokens the provider
served from its prompt cache in the pilot (billed at the cached rate), and without any
caching; else the pilot's cost per token; a model priced by neither is "unpriced", never $0.
Wall time: per batch, the expected longest of `batch_size` episodes
drawn from the pilot's calls per episode (stragglers), at most `max_concurrency` at once,
times the pilot's seconds per uncached call (`--call-seconds` when the pilot was all cache
hits), and never less than what `llm.rpm` / `llm.tpm` allow; the line says the latency it
assumed and where it comes from (a local server's 0.08 s is no hosted API's). It assumes
episodes keep their pilot length (a method that learns to solve tasks shortens them: the plan
is then high).

Before a pilot spends (`memrl plan` without `--from`), its cost is quoted
(memrl.control.pilot_quote) and a question asked at a terminal; `--yes` (or MEMRL_PLAN_YES=1)
answers it, a non-interactive caller without either is refused (exit 1, nothing spent); a
model that runs here (the embedded one) is not asked about. While it works, the plan says what
it does on stderr: listing the tasks (the env's progress lines; the first listing of ALFWorld
reads every game), each pilot (its epoch lines and warnings), and after each pilot what it cost.

`--confirm` (what `make reproduce-*` uses): after the plan, ask "proceed? [y/N]" when stdin
is a terminal; a non-interactive caller, `--yes` or MEMRL_PLAN_YES=1 proceeds. Exit status: 0
go ahead, 1 declined (a pilot or the run), 2 a configuration problem (`memrl: ...`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any, Sequence

from memrl.core.errors import ConfigError

PLAN_YES_ENV = "MEMRL_PLAN_YES"
DEFAULT_PILOT_TASKS = 4


# ------------------------------------------------------------------------------ sweeps
def expand(overrides: Sequence[str], multirun: bool) -> list[list[str]]:
    """The runs of a command: one list of overrides each (a sweep's product with -m)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    choices: list[list[str]] = []
    for o in parsed:
        if o.is_sweep_override():
            if not multirun:
                raise ConfigError(f"{o.input_line}: a sweep needs -m (--multirun)")
            key = o.get_key_element()
            choices.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([o.input_line])
    return [list(c) for c in itertools.product(*choices)] if choices else [[]]


def compose(overrides: Sequence[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from memrl.config.frame import CONFIG_DIR
    from memrl.config.groups import check_group_choices

    check_group_choices(overrides)  # a missing group option: memrl's message, not Hydra's
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return hydra_compose("config", overrides=list(overrides))
    except Exception as exc:
        raise ConfigError(f"cannot compose the config: {exc}") from exc


def run_name(overrides: Sequence[str]) -> str:
    """A directory name for a run's pilot: readable, and unique for its overrides."""
    text = ",".join(sorted(overrides)) or "defaults"
    # no '=' or ',' (Hydra's override grammar would read them in hydra.run.dir=...)
    short = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80]
    return f"{short}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


# ------------------------------------------------------------------------------ evidence
@dataclass
class Evidence:
    """What a pilot (or an earlier run) shows, per episode of its first epoch."""

    source: str
    episodes: int = 0
    calls: float = 0.0             # model requests per episode
    prompt_per_call: float = 0.0   # prompt tokens per call, as measured
    completion_per_call: float = 0.0
    injected_chars: float = 0.0    # injected characters per episode (first epoch)
    memory_chars: float = 0.0      # size of one injected memory (any epoch)
    max_injected: int = 0          # most memories injected at once (any epoch)
    seconds_per_call: float | None = None  # uncached episodes' duration / calls
    calls_sample: list[int] = field(default_factory=list)  # calls per episode (stragglers)
    first_batches: list[tuple[int, int]] = field(default_factory=list)  # (batch, memories shown), epoch 1
    cost_per_token: float = 0.0
    pilot_calls: int = 0           # requests the pilot made (served from cache to the real run)
    reasoning_per_call: float = 0.0  # of completion_per_call: hidden reasoning
    cached_share: float = 0.0      # prompt tokens the provider served from its prompt cache
    unpriced: bool = False         # the pilot's calls had no known price


def _load(run_dir: Path) -> tuple[list[dict], dict]:
    from memrl.core.records import iter_jsonl
    from memrl.core.rundir import RunDir

    rd = RunDir(run_dir)
    if not rd.episodes.exists():
        raise ConfigError(f"{run_dir}: no episode records (episodes.jsonl) to estimate from")
    records = list(iter_jsonl(rd.episodes))
    card = json.loads(rd.card.read_text(encoding="utf-8")) if rd.card.exists() else {}
    return records, card


def _chars(memories: list[dict]) -> int:
    return sum(int(m.get("chars", 0)) for m in memories)


def evidence(run_dir: Path, source: str) -> Evidence:
    records, card = _load(run_dir)
    first = [r for r in records if int(r["epoch"]) == 1 and not r.get("info", {}).get("carried")]
    if not first:
        raise ConfigError(f"{run_dir}: no first-epoch episodes to estimate from")
    calls = sum(r["llm_calls"] for r in first)
    ev = Evidence(source=source, episodes=len(first), calls=calls / len(first),
                  calls_sample=sorted(int(r["llm_calls"]) for r in first))
    if calls:
        ev.prompt_per_call = sum(r["tokens"]["prompt"] for r in first) / calls
        ev.completion_per_call = sum(r["tokens"]["completion"] for r in first) / calls
        ev.reasoning_per_call = sum(r["tokens"].get("reasoning", 0) for r in first) / calls
        prompt = sum(r["tokens"]["prompt"] for r in first)
        ev.cached_share = sum(r["tokens"].get("cached_prompt", 0) for r in first) / prompt if prompt else 0.0
        ev.unpriced = any(c.get("unpriced") for r in first for c in r.get("model_calls") or [])
        # the prompt without memories: what was measured, less what injection added
        ev.injected_chars = mean(_chars(r["injected"]) for r in first)
    shown = [m for r in records for m in r["injected"]]
    if shown:
        ev.memory_chars = mean(int(m.get("chars", 0)) for m in shown)
        ev.max_injected = max(len(r["injected"]) for r in records)
    ev.first_batches = [(int(r["batch"]), len(r["injected"])) for r in first]
    # the median episode's seconds per call: the first episodes of a process pay its warm-up
    fresh = sorted(r["duration_s"] / r["llm_calls"] for r in first if r["llm_calls"] and r["cache_hits"] == 0)
    if fresh:
        ev.seconds_per_call = fresh[len(fresh) // 2]
    totals = card.get("llm_totals") or {}
    tokens = int(totals.get("prompt_tokens", 0)) + int(totals.get("completion_tokens", 0))
    if tokens and float(totals.get("cost_usd", 0.0)) > 0:
        ev.cost_per_token = float(totals["cost_usd"]) / tokens
    ev.pilot_calls = sum(int(r["llm_calls"]) for r in records)
    return ev


# ------------------------------------------------------------------------------ the plan
@dataclass
class RunPlan:
    run: str
    tasks: int
    epochs: int
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    wall_s: float | None
    concurrency: int
    source: str
    notes: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0        # of completion_tokens
    cached_share: float = 0.0        # of prompt tokens, served from the provider's prompt cache
    cost_usd_no_cache: float = 0.0   # the same without prompt caching
    unpriced: bool = False           # no price known: the costs are not estimates
    seconds_per_call: float | None = None  # the latency the wall time assumes
    latency_from: str = ""           # where that latency comes from

    def line(self) -> str:
        wall = "unknown (no uncached pilot call: pass --call-seconds)" if self.wall_s is None \
            else (f"{_duration(self.wall_s)}, assuming {self.seconds_per_call:.2f} s per model call "
                  f"({self.latency_from}; another server, model or load differs: --call-seconds S sets it)")
        reasoning = f" (of which {self.reasoning_tokens:,} reasoning)" if self.reasoning_tokens else ""
        if self.unpriced:
            cost = "cost unpriced (no price for the model: set llm.price_per_mtok_in / _out)"
        else:
            cost = (f"${self.cost_usd:,.2f} with the pilot's prompt caching ({self.cached_share:.0%} of "
                    f"prompt tokens cached), ${self.cost_usd_no_cache:,.2f} without")
        return (f"{self.run}\n  {self.tasks} tasks x {self.epochs} epochs = {self.tasks * self.epochs} episodes; "
                f"{self.requests:,} model requests; {self.prompt_tokens:,} prompt + "
                f"{self.completion_tokens:,} completion tokens{reasoning}; {cost}; "
                f"wall {wall} at concurrency {self.concurrency}\n  from: {self.source}"
                + "".join(f"\n  note: {n}" for n in self.notes))


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def expected_max(sample: Sequence[int], k: int) -> float:
    """E[max of k draws with replacement] from the empirical distribution `sample`."""
    xs = sorted(sample)
    n = len(xs)
    if not n:
        return 0.0
    return sum(x * ((i / n) ** k - ((i - 1) / n) ** k) for i, x in enumerate(xs, 1))


def pool_calls(episodes: int, calls: float, sample: Sequence[int], width: int, drains: int) -> float:
    """Model calls in series that a free pool of `width` episodes needs for `episodes`
    episodes of `calls` calls on average (`sample`: calls per episode): the work spread over
    the slots, plus per drain what the longest of the last `width` episodes adds beyond the
    half of an average one that each slot has left on average when the queue runs dry."""
    drain = max(0.0, expected_max(sample, width) - calls / 2) if sample else 0.0
    return episodes * calls / width + drains * drain


def model_prices(llm: Any) -> Any:
    """The model's prices (memrl.llm.profile.Prices: the config's, the project's list,
    litellm's), None when none knows them or the model runs here."""
    if llm.backend != "litellm" or not llm.model:
        return None
    from memrl.llm.profile import litellm_profile

    try:
        return litellm_profile(llm.model_dump()).prices
    except ValueError:
        return None


def estimate(name: str, v: Any, n_tasks: int, ev: Evidence, *, chars_per_token: float = 4.0,
             call_seconds: float | None = None) -> RunPlan:
    """The plan for one run (`v`: its validated config) from a pilot's evidence (module doc)."""
    E, N, r = int(v.runner.epochs), n_tasks, v.runner
    B = int(r.batch_size)
    base = max(0.0, ev.prompt_per_call - ev.injected_chars / max(ev.calls, 1e-9) / chars_per_token) \
        if ev.calls else 0.0
    # memories shown per episode: up to k (the method's k2 / k), as many as the bank holds
    # (about one entry per earlier episode); in epoch 1 the pilot's share of what could have
    # been shown (similarity gates, critiques) applies, from epoch 2 on the bank is full
    k = int(getattr(v.memory, "k2", None) or getattr(v.memory, "k", None) or ev.max_injected) \
        if ev.max_injected else 0
    possible = sum(min(k, B * b) for b, _ in ev.first_batches)
    rate = min(1.0, sum(n for _, n in ev.first_batches) / possible) if possible else 1.0
    notes: list[str] = []
    requests = prompt = completion = 0.0
    for epoch in range(1, E + 1):
        if epoch == 1:
            shown = sum(min(k, B * (i // B)) for i in range(N)) * rate / N
        else:
            shown = k
        per_call = base + shown * ev.memory_chars / chars_per_token
        requests += N * ev.calls
        prompt += N * ev.calls * per_call
        completion += N * ev.calls * ev.completion_per_call
    if v.memory_cls is not None and getattr(v.memory, "name", "none") != "none" and ev.max_injected == 0:
        notes.append("no memory was injected in the evidence: prompt growth is not modelled")
    prices = model_prices(v.llm)
    share = min(1.0, max(0.0, ev.cached_share))
    if prices is not None:
        cost = prices.cost(round(prompt), round(completion), round(prompt * share), calls=requests)
        no_cache = prices.cost(round(prompt), round(completion), 0, calls=requests)
    else:
        cost = no_cache = (prompt + completion) * ev.cost_per_token
    unpriced = prices is None and ev.cost_per_token == 0 and v.llm.backend == "litellm" and \
        (prompt + completion) > 0
    conc_cap = int(v.llm.max_concurrency)
    schedule = getattr(r, "schedule", "batch")
    spc = call_seconds if call_seconds is not None else ev.seconds_per_call
    wall: float | None = None
    if schedule == "async":
        conc = min(conc_cap, int(getattr(r, "max_in_flight", conc_cap)))
        if spc is not None:
            # one drain at the run's end when epochs overlap; one per epoch at barriers
            wall = pool_calls(E * N, ev.calls, ev.calls_sample, min(conc, N), E if r.async_barriers else 1) * spc
    else:
        conc = min(B, conc_cap)
        if spc is not None:
            n_batches = math.ceil(N / B)
            per_batch = max(expected_max(ev.calls_sample, min(B, N)), min(B, N) * ev.calls / conc)
            wall = E * n_batches * per_batch * spc
    if wall is not None:
        if v.llm.rpm:
            wall = max(wall, requests / v.llm.rpm * 60)
        if v.llm.tpm:
            wall = max(wall, (prompt + completion) / v.llm.tpm * 60)
    latency_from = "--call-seconds" if call_seconds is not None else \
        f"the median uncached call of {ev.source}"
    return RunPlan(run=name, tasks=N, epochs=E, requests=round(requests), prompt_tokens=round(prompt),
                   completion_tokens=round(completion), cost_usd=cost, wall_s=wall, concurrency=conc,
                   source=ev.source, notes=notes,
                   reasoning_tokens=round(requests * ev.reasoning_per_call), cached_share=share,
                   cost_usd_no_cache=no_cache, unpriced=unpriced, seconds_per_call=spc,
                   latency_from=latency_from if spc is not None else "")


# ------------------------------------------------------------------------------ pilots
def count_tasks(v: Any) -> int:
    env = v.env_cls(v.env, agent=v.agent.name)
    try:
        return len(env.tasks())
    finally:
        env.close()


# a pilot's lines shown while it runs (quiet): its epoch lines and its warnings
PILOT_SHOWN = re.compile(r"\]\[(?:WARNING|ERROR)\] - (.*)$|\] - (epoch \d+/\d+: .*)$")


def pilot(overrides: Sequence[str], pilot_dir: Path, n_tasks: int, epochs: int, *,
          quiet: bool = True, echo: Any = None) -> None:
    """Play the run's first `n_tasks` tasks for `epochs` epochs into `pilot_dir` (a real run,
    with the run's own response cache). `quiet`: its output is kept back, but for its epoch
    lines and warnings, which go to `echo` as they come (the rest is shown if it fails)."""
    args = [*overrides, f"env.max_tasks={n_tasks}", f"runner.epochs={epochs}", "runner.progress=false",
            f"hydra.run.dir={pilot_dir}"]
    command = [sys.executable, "-m", "memrl.cli", "run", *args]
    if not quiet:
        rc, tail = subprocess.run(command).returncode, ""
    else:
        kept: list[str] = []
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                kept = (kept + [line])[-60:]
                match = PILOT_SHOWN.search(line.rstrip())
                if echo is not None and match:
                    echo(f"  pilot: {match.group(1) or match.group(2)}")
            rc = proc.wait()
        tail = "".join(kept)[-2000:]
    if rc != 0:
        raise ConfigError(f"the pilot run failed (exit {rc}): python -m memrl.cli run "
                          f"{' '.join(args)}\n{tail}")


def _is_hydra(override: str) -> bool:
    """An override of Hydra's own settings (hydra.sweep.dir, ...): not the run's config. The
    search path is kept: it decides which config groups compose (a test's fixtures add some)."""
    key = override.lstrip("+~")
    return key.startswith("hydra.") and not key.startswith("hydra.searchpath=")


def _without(overrides: Sequence[str], keys: Sequence[str]) -> list[str]:
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in keys]
