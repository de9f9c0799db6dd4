"""ALFWorld (TextWorld household games) behind the Env seam."""

from .adapter import AlfworldEnv
from .settings import AlfworldSettings

__all__ = ["AlfworldEnv", "AlfworldSettings"]
