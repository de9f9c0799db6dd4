"""What a compiled seccomp filter does with a given call: a classic-BPF interpreter over the
program bytes the kernel receives (`seccomp.filter_support().program`).

The sandbox's facts about its filter are read from the program this way, not from the list the
filter was built from: a rule libseccomp accepted but did not install (a call the architecture
lacks) or rejected cannot then appear as refused.

Only what seccomp filters use is interpreted (loads from `struct seccomp_data`, the scratch
memory, ALU with a constant or X, jumps, returns); anything else raises `ValueError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# seccomp return actions (linux/seccomp.h), the top 16 bits of a return value
KILL_PROCESS = 0x80000000
KILL_THREAD = 0x00000000
TRAP = 0x00030000
ERRNO = 0x00050000
USER_NOTIF = 0x7FC00000
TRACE = 0x7FF00000
LOG = 0x7FFC0000
ALLOW = 0x7FFF0000
ACTION_MASK = 0xFFFF0000

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
AUDIT_ARCH_ARM = 0x40000028
# the 32-bit ABI a 64-bit kernel also accepts (a "foreign" architecture to a native filter)
FOREIGN_ABI = {AUDIT_ARCH_X86_64: AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64: AUDIT_ARCH_ARM}

_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Insn:
    code: int
    jt: int
    jf: int
    k: int


def parse(program: bytes) -> list[Insn]:
    if len(program) % 8:
        raise ValueError(f"a BPF program is a whole number of 8-byte instructions, not {len(program)} bytes")
    return [Insn(*struct.unpack_from("=HBBI", program, i)) for i in range(0, len(program), 8)]


def seccomp_data(nr: int, arch: int, args: tuple[int, ...] = (), ip: int = 0) -> bytes:
    """`struct seccomp_data` as the kernel lays it out for one call."""
    full = (list(args) + [0] * 6)[:6]
    return struct.pack("=iIQ6Q", nr, arch, ip, *(a & 0xFFFFFFFFFFFFFFFF for a in full))


def _alu(op: int, a: int, v: int) -> int:
    if op == 0x00:
        return (a + v) & _MASK32
    if op == 0x10:
        return (a - v) & _MASK32
    if op == 0x20:
        return (a * v) & _MASK32
    if op == 0x30:
        return a // v if v else 0
    if op == 0x40:
        return a | v
    if op == 0x50:
        return a & v
    if op == 0x60:
        return (a << v) & _MASK32 if v < 32 else 0
    if op == 0x70:
        return a >> v if v < 32 else 0
    if op == 0x80:
        return (-a) & _MASK32
    if op == 0x90:
        return a % v if v else 0
    if op == 0xA0:
        return a ^ v
    raise ValueError(f"unknown BPF ALU operation {op:#x}")


def run(program: bytes | list[Insn], data: bytes) -> int:
    """The filter's return value (action | data) for one `seccomp_data`."""
    insns = parse(program) if isinstance(program, bytes) else program
    a = x = 0
    mem = [0] * 16
    pc = 0
    for _ in range(len(insns) + 1):  # classic BPF only jumps forward
        if pc >= len(insns):
            raise ValueError("the program ran off its end without returning")
        ins = insns[pc]
        pc += 1
        cls = ins.code & 0x07
        if cls in (0, 1):  # LD, LDX
            mode, size = ins.code & 0xE0, ins.code & 0x18
            if mode == 0x00:
                value = ins.k
            elif mode == 0x20 and size == 0x00:
                if ins.k + 4 > len(data):
                    raise ValueError(f"load past seccomp_data at offset {ins.k}")
                value = struct.unpack_from("=I", data, ins.k)[0]
            elif mode == 0x60:
                value = mem[ins.k]
            elif mode == 0x80:
                value = len(data)
            else:
                raise ValueError(f"unsupported BPF load {ins.code:#x}")
            if cls == 0:
                a = value
            else:
                x = value
        elif cls == 2:
            mem[ins.k] = a
        elif cls == 3:
            mem[ins.k] = x
        elif cls == 4:
            a = _alu(ins.code & 0xF0, a, x if ins.code & 0x08 else ins.k)
        elif cls == 5:
            op = ins.code & 0xF0
            if op == 0x00:
                pc += ins.k
                continue
            v = x if ins.code & 0x08 else ins.k
            hit = {0x10: a == v, 0x20: a > v, 0x30: a >= v, 0x40: bool(a & v)}.get(op)
            if hit is None:
                raise ValueError(f"unknown BPF jump {ins.code:#x}")
            pc += ins.jt if hit else ins.jf
        elif cls == 6:
            rval = ins.code & 0x18
            return {0x00: ins.k, 0x08: x, 0x10: a}[rval] & _MASK32
        else:  # MISC
            if ins.code & 0xF8 == 0x00:
                x = a
            elif ins.code & 0xF8 == 0x80:
                a = x
            else:
                raise ValueError(f"unknown BPF misc instruction {ins.code:#x}")
    raise ValueError("the program did not return")


def verdict(program: bytes | list[Insn], nr: int, arch: int, args: tuple[int, ...] = ()) -> tuple[int, int]:
    """(action, data) for the call `nr` of ABI `arch` with `args`: e.g. (ERRNO, 1) is EPERM."""
    value = run(program, seccomp_data(nr, arch, args))
    return value & ACTION_MASK, value & 0xFFFF
