"""The system-call filter's facts are what the kernel enforces: the run card's list is read from
the compiled program, and the program, loaded into a real process, refuses each call the card
names, where the same call succeeds without it (the control run)."""

from __future__ import annotations

import ctypes.util
import errno
import importlib.util
import os
import random
import struct

import pytest

import sandbox_probe
from memrl_envs.sandbox import bpf, seccomp
from memrl_envs.sandbox.seccomp import DENIED, PERSONAS, filter_support

_NO_FILTER = filter_support().why_not or None
needs_filter = pytest.mark.skipif(_NO_FILTER is not None, reason=f"no filter here: {_NO_FILTER}")


def test_the_filter_is_built_wherever_libseccomp_is_present():
    if ctypes.util.find_library("seccomp") is None or importlib.util.find_spec("pyseccomp") is None:
        assert filter_support().program is None and filter_support().why_not  # said, never silent
        pytest.skip("no libseccomp or pyseccomp here; the card says why")
    support = filter_support()
    assert support.program is not None, support.why_not
    assert support.facts()["missing"] == {}


@needs_filter
def test_the_card_names_only_calls_the_compiled_program_refuses():
    support = filter_support()
    facts = support.facts()
    plain = [name for name in facts["refused"] if " " not in name]
    assert plain and set(plain) <= set(DENIED)
    for name in plain:  # each exists here, and the program the kernel gets refuses it
        assert bpf.verdict(support.program, support.numbers[name], support.arch) == (bpf.ERRNO, errno.EPERM), name
    if support.arch == bpf.AUDIT_ARCH_X86_64:
        # calls x86-64 does not have are not named (the four)
        for absent in ("stime", "umount", "vm86", "vm86old"):
            assert absent not in support.numbers and absent not in plain and absent not in facts["missing"], absent
        assert len(plain) == len(DENIED) - 4


@needs_filter
def test_a_rule_libseccomp_rejects_is_named_missing(monkeypatch):
    import pyseccomp

    keyctl = filter_support().numbers["keyctl"]
    real = pyseccomp.SyscallFilter.add_rule

    def add_rule(self, action, syscall, *args):
        if syscall == keyctl:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(self, action, syscall, *args)

    monkeypatch.setattr(pyseccomp.SyscallFilter, "add_rule", add_rule)
    facts = seccomp._build().facts()
    assert "keyctl" not in facts["refused"]
    assert facts["missing"]["keyctl"].startswith("libseccomp rejected the rule"), facts["missing"]


@needs_filter
def test_a_foreign_abi_call_kills_the_process():
    support = filter_support()
    if support.arch not in bpf.FOREIGN_ABI:
        pytest.skip("this architecture has no 32-bit ABI beside it")
    assert support.facts()["foreign_abi"] == "kills the process (SIGSYS)"
    for nr in (1, 20, 120, 400):  # whatever the call
        assert bpf.verdict(support.program, nr, bpf.FOREIGN_ABI[support.arch])[0] == bpf.KILL_PROCESS


@needs_filter
def test_only_dockers_personas_are_allowed():
    support = filter_support()
    nr = support.numbers["personality"]

    def refused(value: int) -> bool:
        got = bpf.verdict(support.program, nr, support.arch, (value,))
        assert got in ((bpf.ALLOW, 0), (bpf.ERRNO, errno.EPERM)), got
        return got == (bpf.ERRNO, errno.EPERM)

    assert not any(refused(p) for p in PERSONAS)
    assert all(refused(1 << b) for b in range(32) if (1 << b) not in PERSONAS)
    rng = random.Random(32)
    values = [rng.getrandbits(32) for _ in range(3000)] + [0xFFFFFFFF ^ (1 << b) for b in range(32)]
    assert all(refused(v) == (v not in PERSONAS) for v in values)
    assert any(p.startswith("personality but") for p in support.facts()["refused"])


def test_the_interpreter_runs_a_hand_made_program():
    # load nr; if nr == 39 return ERRNO|EPERM; if nr & 0x40000000 return KILL_PROCESS; return ALLOW
    prog = b"".join(struct.pack("=HBBI", *i) for i in [
        (0x20, 0, 0, 0), (0x15, 0, 1, 39), (0x06, 0, 0, bpf.ERRNO | 1),
        (0x45, 0, 1, 0x40000000), (0x06, 0, 0, bpf.KILL_PROCESS), (0x06, 0, 0, bpf.ALLOW)])
    assert bpf.verdict(prog, 39, bpf.AUDIT_ARCH_X86_64) == (bpf.ERRNO, 1)
    assert bpf.verdict(prog, 0x40000027, bpf.AUDIT_ARCH_X86_64) == (bpf.KILL_PROCESS, 0)
    assert bpf.verdict(prog, 40, bpf.AUDIT_ARCH_X86_64) == (bpf.ALLOW, 0)
    with pytest.raises(ValueError):
        bpf.run(prog[:-8] + struct.pack("=HBBI", 0xFF, 0, 0, 0), bpf.seccomp_data(40, 0))


_NO_PROBE = sandbox_probe.why_not() or (None if os.geteuid() == 0 else "the control run needs root")


@needs_filter
@pytest.mark.skipif(_NO_PROBE is not None, reason=f"no probe here: {_NO_PROBE}")
def test_each_call_the_filter_refuses_succeeds_without_it(tmp_path):
    """The control run (no filter, as host root) shows every probe's call succeeds; the same
    program with the sandboxes' compiled filter loaded gets exactly what the card says."""
    control = sandbox_probe.run_on_host(None, tmp_path)
    assert control == {name: "ok" for name in sandbox_probe.NAMES}, control
    filtered = sandbox_probe.run_on_host(filter_support().program, tmp_path)
    expected = {"getpid": "ok", "clone3": f"refused {errno.ENOSYS}",
                **{name: f"killed {31}" for name in sandbox_probe.KILLED},  # SIGSYS
                **{name: f"refused {errno.EPERM}" for name in sandbox_probe.REFUSED_EPERM}}
    assert filtered == expected, filtered
