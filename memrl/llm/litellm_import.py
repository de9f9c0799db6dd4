"""Importing litellm: quietly and offline (its local price list, no debug banners, no INFO line
per request). Every module that uses litellm imports it through `import_litellm`."""

from __future__ import annotations

import logging
import os
from types import ModuleType

# Loggers that write a line per request at INFO (litellm's own, and httpx's "HTTP Request:"
# line): they would fill a run's log; warnings and errors still show.
CHATTY_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx")


def import_litellm() -> ModuleType:
    """litellm, with `LITELLM_LOCAL_MODEL_COST_MAP=True` set first (no download of a price
    list at import) and its chatty loggers at WARNING."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return litellm
