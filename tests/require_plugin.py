"""No silent skips (loaded by tests/conftest.py).

A test skips when what it needs is not on the machine: a data set (tests/data_paths.py), root,
bubblewrap, libseccomp, MariaDB, chromium, an optional extra. On a user's machine that stays a
skip; CI sets `MEMRL_TEST_REQUIRE=all` (.ci/run), and then every such skip is a failure that
names what is missing, so a green CI run means the tests ran. A module that skips as a whole
at collection (an extra it imports is not installed) becomes one failing item, `requirements`,
so the rest of the suite still runs.

Either way the run ends with one line that counts the skips and their reasons.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from _pytest.reports import CollectReport

VARIABLE = "MEMRL_TEST_REQUIRE"


def strict() -> bool:
    value = os.environ.get(VARIABLE, "").strip().lower()
    if value not in ("", "all", "0", "none"):
        raise pytest.UsageError(f"{VARIABLE}={value!r}: 'all' (a skip is a failure) or unset")
    return value == "all"


def _reason(longrepr) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _missing(reason: str) -> str:
    return f"{VARIABLE}=all and this test would skip: {reason}"


class MissingRequirement(pytest.Item):
    """Stands for a test module that skipped at collection under `MEMRL_TEST_REQUIRE=all`."""

    def __init__(self, *, reason: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.reason = reason

    def runtest(self) -> None:
        pytest.fail(_missing(self.reason), pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{self.name}: {self.reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and strict() and isinstance(collector, pytest.Module):
        item = MissingRequirement.from_parent(collector, name="requirements", reason=_reason(rep.longrepr))
        outcome.force_result(CollectReport(rep.nodeid, "passed", None, [item]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and not hasattr(rep, "wasxfail") and strict():
        rep.outcome = "failed"
        rep.longrepr = _missing(_reason(rep.longrepr))


def _cassette_line(terminalreporter) -> str | None:
    """Calls that went to the real model because a test's cassette did not hold them
    (tests/cassette.py), from every report (xdist workers' included)."""
    missed: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            for key, value in getattr(rep, "user_properties", ()) or ():
                if key == "cassette_misses":
                    name, n = value
                    missed[name] = max(missed.get(name, 0), int(n))
    if not missed:
        return None
    parts = ", ".join(f"{name} ({n})" for name, n in sorted(missed.items()))
    return (f"cassettes: {sum(missed.values())} model calls were not in the cassettes and ran on the model "
            f"(re-record: MEMRL_RECORD_CASSETTES=1): {parts}")


def pytest_terminal_summary(terminalreporter) -> None:
    line = _cassette_line(terminalreporter)
    if line:
        terminalreporter.write_line(line, yellow=True)
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        terminalreporter.write_line(f"skips: 0 ({VARIABLE}={os.environ.get(VARIABLE, '') or 'unset'})")
        return
    reasons = Counter(_reason(r.longrepr) for r in skipped)
    parts = "; ".join(f"{n} × {why}" for why, n in reasons.most_common())
    terminalreporter.write_line(f"skips: {len(skipped)} ({parts})", yellow=True)
