"""Running untrusted, model-written code and commands away from the host.

`run_isolated` is the one entry point; `bubblewrap` (Linux namespaces) is the isolation layer.
See `isolate.py` for what a sandboxed process can and cannot do.
"""

from .isolate import (Limits, SandboxError, SandboxResult, bwrap_available, limits_preexec, rootfs_argv,
                      run_isolated)

__all__ = ["Limits", "SandboxError", "SandboxResult", "bwrap_available", "limits_preexec", "rootfs_argv",
           "run_isolated"]
