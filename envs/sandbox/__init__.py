"""Running untrusted, model-written code and commands away from the host.

`run_isolated` is the one entry point; `bubblewrap` (Linux namespaces) is the isolation layer,
`cgroups` caps a whole sandbox, `masks` hides the kernel's interfaces, `hostview` is what of
the host a host-root sandbox sees, `fit` checks that the sandboxes run at once fit the machine, `seccomp` is the
system-call filter.
See `isolate.py` for what a sandboxed process can and cannot do.
"""

from .cgroups import CgroupSupport, SandboxCgroup, cgroup_support
from .fit import ParallelPlan, SandboxFitError, log_sandbox_facts, plan_parallel
from .hostview import python_binds
from .seccomp import filter_fd, filter_support
from .isolate import (Limits, SandboxError, SandboxResult, bwrap_available, caps_report, limits_preexec,
                      rootfs_argv, run_isolated, sandbox_cgroup)

__all__ = ["CgroupSupport", "Limits", "ParallelPlan", "SandboxCgroup", "SandboxError", "SandboxFitError",
           "SandboxResult", "bwrap_available", "caps_report", "cgroup_support", "filter_fd", "filter_support",
           "limits_preexec",
           "log_sandbox_facts", "plan_parallel", "python_binds", "rootfs_argv", "run_isolated", "sandbox_cgroup"]
