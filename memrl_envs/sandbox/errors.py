"""The sandbox package's own error."""


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up (not: the code inside failed)."""
