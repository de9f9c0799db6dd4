"""The Lifelong-OS task record: its schema check (for the loader) and the typed view of a row.

A row (upstream ``os_interaction`` data)::

    {"instruction": str,
     "initialization_command_item": {"command_name": "bash", "script": str},
     "evaluation_info": {"evaluation_command_item": {"command_name": "bash", "script": str},
                         "ground_truth_command_item": {"command_name": "bash", "script": str}},
     "skill_list": [str, ...]}

The nested objects may arrive as Python-literal strings (hub tables). Only ``bash`` command
items are supported: upstream also names python/c/cpp, which no task of the released data uses.
"""

from __future__ import annotations

from typing import Any

from memrl_envs.lifelong_os.episode import OsTask

LITERAL_FIELDS = ("initialization_command_item", "evaluation_info", "skill_list")
SHELLS = ("bash",)


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def _script(item: Any, where: str, allow_empty: bool) -> str:
    _need(isinstance(item, dict), f"{where}: missing or not an object")
    name = item.get("command_name", "bash")
    _need(name in SHELLS, f"{where}.command_name: {name!r} is not supported (only bash)")
    script = item.get("script")
    _need(isinstance(script, str), f"{where}.script: missing or not a string")
    _need(allow_empty or script.strip() != "", f"{where}.script: empty")
    _need("\0" not in script, f"{where}.script: contains a NUL character")
    return script


def check_row(row: dict[str, Any]) -> None:
    """Raise ValueError naming the first problem of an OS task row (the loader skips it)."""
    _need(isinstance(row.get("instruction"), str) and row["instruction"].strip() != "",
          "instruction: missing or empty")
    _script(row.get("initialization_command_item", {"script": ""}), "initialization_command_item", True)
    info = row.get("evaluation_info")
    _need(isinstance(info, dict), "evaluation_info: missing or not an object")
    _script(info.get("evaluation_command_item"), "evaluation_info.evaluation_command_item", False)
    _script(info.get("ground_truth_command_item"), "evaluation_info.ground_truth_command_item", False)
    skills = row.get("skill_list", [])
    _need(isinstance(skills, (list, tuple)) and all(isinstance(s, str) for s in skills),
          "skill_list: not a list of strings")


def task_from_row(key: str, row: dict[str, Any]) -> OsTask:
    check_row(row)
    info = row["evaluation_info"]
    return OsTask(
        key=key,
        instruction=row["instruction"].strip(),
        init_script=row.get("initialization_command_item", {"script": ""})["script"],
        eval_script=info["evaluation_command_item"]["script"],
        gold_script=info["ground_truth_command_item"]["script"],
        skills=tuple(row.get("skill_list") or ()),
    )
