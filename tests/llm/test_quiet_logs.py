"""A run's start is quiet (issue 33, item 3): llama.cpp's notices (its SWA-cache line, logged at
its error level at every load) do not reach stderr, its real errors still would; matplotlib's
tight-layout warning is not printed for a figure whose labels cannot all fit."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings

import pytest


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                    reason="llama_cpp (llama-cpp-python, the `local` extra) is not installed")
def test_loading_the_embedded_model_prints_nothing():
    code = ("from memrl.llm.local import LocalLlamaBackend, _NOT_ERRORS\n"
            "LocalLlamaBackend()._load()\nprint('loaded')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "loaded", out.stderr[-2000:]
    assert "llama_kv_cache_iswa" not in out.stderr and "llama_" not in out.stderr, out.stderr[-2000:]


def test_a_figure_too_small_for_its_labels_is_saved_without_a_warning(tmp_path):
    from memrl.report.figures import _plt, tight

    plt = _plt()
    fig, ax = plt.subplots(figsize=(0.6, 0.6))
    ax.set_title("a title far too long for so small a figure " * 4)
    ax.set_xlabel("x " * 50)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tight(fig)
    plt.close(fig)
    assert not [w for w in caught if "ight" in str(w.message)]
