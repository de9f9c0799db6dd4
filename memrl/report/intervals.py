"""One interval per quantity, chosen for small n, with n named: what every table and figure of
the report, the run's own plots (memrl.report.plots) and the MemRL page (memrl.view) draw
around the same number.

- A rate of one replicate (an epoch's SR or CSR: k of its N tasks; a forgetting rate: the
  forgotten of the epoch's failed tasks; a Q-calibration bin: successes of its episodes):
  the 95% Wilson score interval over those units (`proportion`), which stays inside [0, 1]
  and keeps its width at 0/n and n/n.
- The mean over distinct replicates (two or more runs of one group that are not copies of
  each other, memrl.report.replicates): the 95% Student-t interval over the replicates
  (`over_replicates`).
- A number of one replicate that is not a proportion (a mean forgetting rate over epochs, the
  best SR over epochs): no interval ("–"), never a zero-width one.

Each `Estimate` carries `how`, the words the tables and legends print, e.g. "Wilson, n=3
tasks" or "t, n=2 replicates".
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from memrl.metrics.compute import wilson
from memrl.report.stats import t_interval


class Estimate(NamedTuple):
    mean: float
    lo: float
    hi: float
    how: str  # which 95% interval, with its n ("" when there is none)
    n: int    # the units the interval is over (tasks, episodes or replicates)


NAN = math.nan


def proportion(k: int, n: int, unit: str = "tasks") -> Estimate:
    """k of n units: the rate with its 95% Wilson interval."""
    if n <= 0:
        return Estimate(NAN, NAN, NAN, "", 0)
    p, lo, hi = wilson(int(k), int(n))
    return Estimate(p, lo, hi, f"Wilson, n={n} {unit}", int(n))


def over_replicates(values: Sequence[float | None]) -> Estimate:
    """The mean over replicates with its 95% Student-t interval (none for one value)."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return Estimate(NAN, NAN, NAN, "", 0)
    m, lo, hi = t_interval(xs)
    how = f"t, n={len(xs)} replicates" if len(xs) > 1 else ""
    return Estimate(m, lo, hi, how, len(xs))


def single(value: float | None) -> Estimate:
    """A number of one replicate that is not a proportion: no interval."""
    v = NAN if value is None else float(value)
    return Estimate(v, NAN, NAN, "", 1)


def fmt(e: Estimate, digits: int = 3) -> str:
    """'0.333 [0.061, 0.792]', '0.333 [–]' without an interval, '–' without a value."""
    if e.mean is None or math.isnan(e.mean):
        return "–"
    if math.isnan(e.lo):
        return f"{e.mean:.{digits}f} [–]"
    return f"{e.mean:.{digits}f} [{e.lo:.{digits}f}, {e.hi:.{digits}f}]"
