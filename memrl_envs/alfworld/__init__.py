"""ALFWorld (TextWorld household games) behind the Env seam."""

from memrl_envs.alfworld.env import AlfworldEnv
from memrl_envs.alfworld.settings import AlfworldSettings

__all__ = ["AlfworldEnv", "AlfworldSettings"]
