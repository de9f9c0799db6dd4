"""Running untrusted, model-written code and commands away from the host.

`run_isolated` is the one entry point; `bubblewrap` (Linux namespaces) is the isolation layer
(`bwrap_args` builds its command line), `cgroups` caps a whole sandbox (`cgroupfs` finds the
hierarchies), `masks` hides the kernel's interfaces, `hostview` is what of the host a host-root
sandbox sees, `fit` checks that the sandboxes run at once fit the machine, `seccomp` is the
system-call filter (`bpf` reads what its compiled program does), `uids` leases each host-root
sandbox a uid and each root-file-system sandbox a range of ids of its own, `userns` maps root
inside a root-file-system sandbox to its range, `idmap` shows the cached tree as owned by it.
See `isolate.py` and docs/sandboxes.md for what a sandboxed process can and cannot do.
"""

from memrl_envs.sandbox.bwrap_args import rootfs_argv
from memrl_envs.sandbox.cgroups import CgroupSupport, SandboxCgroup, cgroup_support
from memrl_envs.sandbox.errors import SandboxError
from memrl_envs.sandbox.fit import ParallelPlan, SandboxFitError, log_sandbox_facts, plan_parallel
from memrl_envs.sandbox.hostview import python_binds
from memrl_envs.sandbox.isolate import (CappedReader, Limits, SandboxResult, bwrap_available, caps_report,
                                        limits_preexec, run_isolated, sandbox_cgroup)
from memrl_envs.sandbox.seccomp import filter_fd, filter_support
from memrl_envs.sandbox.userns import HOST_BASE, ID_COUNT, Handshake, UsernsError, userns_available

__all__ = ["CappedReader", "CgroupSupport", "HOST_BASE", "Handshake", "ID_COUNT", "Limits", "ParallelPlan",
           "SandboxCgroup", "SandboxError", "SandboxFitError", "SandboxResult", "UsernsError", "bwrap_available",
           "caps_report", "cgroup_support", "filter_fd", "filter_support", "limits_preexec", "log_sandbox_facts",
           "plan_parallel", "python_binds", "rootfs_argv", "run_isolated", "sandbox_cgroup", "userns_available"]
