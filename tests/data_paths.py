"""Where the tests find benchmark data: the way the Makefile does. Each data set's variable
first (`ALFWORLD_DATA`, `LIFELONG_DATA`, `BIGCODEBENCH_DATA`: the folder that holds the files),
then the sibling shared folder (`../shared/data/<name>`, the development and CI machines').

A test that needs a data set and finds none skips with the path it looked at; under
`MEMRL_TEST_REQUIRE=all` (CI) that skip is a failure naming what is missing (tests/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def data_dir(variable: str, name: str) -> Path:
    """`$variable` when set (and not empty), else `../shared/data/<name>`."""
    value = os.environ.get(variable, "").strip()
    return Path(value).expanduser() if value else SHARED_DATA / name


ALFWORLD = data_dir("ALFWORLD_DATA", "alfworld")
LIFELONG = data_dir("LIFELONG_DATA", "lifelong")
BIGCODEBENCH = data_dir("BIGCODEBENCH_DATA", "bigcodebench")
BCB_HARD_TRAIN = BIGCODEBENCH / "bigcodebench_hard_train.jsonl"
LIFELONG_OS = LIFELONG / "os_interaction_train.json"
LIFELONG_DB = LIFELONG / "db_train.json"
