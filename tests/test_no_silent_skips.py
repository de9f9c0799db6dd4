"""No silent skips (tests/require_plugin.py): under MEMRL_TEST_REQUIRE=all a skip, a skipif mark
and a module skipped at collection each fail and name what is missing; without it they stay
skips and the run ends with one line counting them. Data is found as the Makefile finds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SAMPLE = '''
import pytest
def test_needs_a_frobnicator(): pytest.skip("no frobnicator here")
@pytest.mark.skipif(True, reason="needs root")
def test_needs_root(): pass
def test_plain(): pass
'''
MODULE_SKIP = '''
import pytest
pytest.importorskip("no_such_module_memrl", reason="the xyz extra is not installed")
def test_uses_it(): pass
'''


def _run(tmp_path: Path, require: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(HERE)!r})\n"
                                          "pytest_plugins = ['require_plugin']\n")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "test_extra.py").write_text(MODULE_SKIP)
    env = {"PATH": "/usr/bin:/bin", **({"MEMRL_TEST_REQUIRE": require} if require is not None else {})}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_without_the_variable_skips_stay_skips_and_are_counted(tmp_path):
    out = _run(tmp_path, None)
    assert out.returncode == 0, out.stdout
    assert "1 passed, 3 skipped" in out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("skips: "))
    assert line.startswith("skips: 3 (")
    for why in ("no frobnicator here", "needs root", "the xyz extra is not installed"):
        assert f"1 × {why}" in line


def test_in_ci_every_skip_fails_and_names_what_is_missing(tmp_path):
    out = _run(tmp_path, "all")
    assert out.returncode == 1, out.stdout
    assert "skipped" not in out.stdout.splitlines()[-1]
    for why in ("no frobnicator here", "needs root", "the xyz extra is not installed"):
        assert f"MEMRL_TEST_REQUIRE=all and this test would skip: {why}" in out.stdout
    assert "test_extra.py::requirements" in out.stdout  # the module's stand-in item
    assert "1 passed" in out.stdout.splitlines()[-1]  # the rest still ran


def test_an_unknown_value_is_refused(tmp_path):
    out = _run(tmp_path, "some")
    assert out.returncode != 0
    assert "MEMRL_TEST_REQUIRE='some'" in out.stdout + out.stderr


def test_data_is_found_by_the_makefile_variables_first(monkeypatch, tmp_path):
    import data_paths

    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "alf"))
    monkeypatch.delenv("LIFELONG_DATA", raising=False)
    assert data_paths.data_dir("ALFWORLD_DATA", "alfworld") == tmp_path / "alf"
    assert data_paths.data_dir("LIFELONG_DATA", "lifelong") == data_paths.SHARED_DATA / "lifelong"
    monkeypatch.setenv("LIFELONG_DATA", "  ")
    assert data_paths.data_dir("LIFELONG_DATA", "lifelong") == data_paths.SHARED_DATA / "lifelong"


@pytest.mark.parametrize("name", ["ALFWORLD_DATA", "LIFELONG_DATA"])
def test_the_makefile_exports_the_variables_the_tests_read(name):
    makefile = (HERE.parent / "Makefile").read_text()
    assert f"export {name}" in makefile
