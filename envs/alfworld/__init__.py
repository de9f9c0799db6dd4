"""ALFWorld (TextWorld household games) behind the Env seam."""

from .adapter import AlfworldEnv
from .settings import AlfworldSettings

AlfworldEnv.Settings = AlfworldSettings  # the schema `memrl.config.validate` checks env=alfworld with

__all__ = ["AlfworldEnv"]
