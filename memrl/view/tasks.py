"""The page's task panel (`task-memories`): for a chosen run and task, the memories the task's
episodes wrote, each with its text, Q over time and the episodes it helped or hurt.

What the panel shows is grouped by task into shards (`SHARD_TASKS` tasks each, in the run's
task order). A small page holds every shard inline (one JSON element each) and stays one
self-contained file. When the shards of all runs together pass `INLINE_BYTES` (a paper-scale
run: 35k memories of ~3 KB each), they go to a folder beside the page instead,
`<page name>_files/`, one script per shard, which the page loads when a task of that shard is
chosen: still one command (`memrl view`), still opened from disk (a script file is read
from `file://` where a data file could not be), and the page itself stays a few MB however
long the run. Only the task list is always inline.

A memory's injections are kept as short rows (`[task index, epoch, batch, Q, helped]`); the
page names the task from the run's task list.
"""

from __future__ import annotations

import html
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from memrl.view.data import RunView

SHARD_TASKS = 64
INLINE_BYTES = 4_000_000  # the shards of all runs together; past it they go to side files
SIDE_PREFIX = "task-"


@dataclass(frozen=True)
class SideFiles:
    """Where a page's shards go when they do not fit inline: `<page stem>_files/` beside it."""

    page: Path

    @property
    def folder(self) -> Path:
        return self.page.with_name(self.page.stem + "_files")

    def clear(self) -> None:
        """Remove the shards an earlier page of this name left (a larger run, or a sweep)."""
        if self.folder.is_dir():
            for p in self.folder.glob(SIDE_PREFIX + "*.js"):
                p.unlink()
            if not any(self.folder.iterdir()):
                shutil.rmtree(self.folder)


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _compact(mem: dict[str, Any], index: dict[str, int]) -> dict[str, Any]:
    """A memory as the panel needs it; its injections as `[task index, epoch, batch, Q, helped]`."""
    used = [[index.get(u["task_id"], -1), u["epoch"], u["batch"], u["q"], int(u["effect"] == "helped")]
            for u in mem["used"]]
    return {"id": mem["id"], "epoch": mem["epoch"], "success": mem["success"], "kind": mem["kind"],
            "q_path": mem["q_path"], "removed": mem["removed"], "helped": mem["helped"], "hurt": mem["hurt"],
            "experience": mem["experience"], "used": used}


def _shards(r: "RunView", index: dict[str, int]) -> list[str]:
    """The run's shards, serialised (texts read one shard at a time)."""
    out = []
    for start in range(0, len(r.task_ids), SHARD_TASKS):
        mems = r.task_memories(r.task_ids[start:start + SHARD_TASKS])
        out.append(_json({t: [_compact(m, index) for m in ms] for t, ms in mems.items()}))
    return out


def task_section(runs: Sequence["RunView"], chosen: str | None, side: SideFiles | None = None) -> str:
    """The panel's HTML: task lists inline, shards inline or beside the page (module doc)."""
    payload: dict[str, Any] = {"runs": [], "chosen": chosen, "per": SHARD_TASKS, "side": None}
    shards: list[list[str]] = []
    for r in runs:
        intents = {x.task_id: x.intent for x in r.records}
        index = {t: j for j, t in enumerate(r.task_ids)}
        payload["runs"].append({"label": r.label,
                                "tasks": [[t, f"{j + 1}. {intents.get(t, t)}"] for j, t in enumerate(r.task_ids)]})
        shards.append(_shards(r, index))
    if payload["chosen"] is None and runs and runs[0].task_ids:
        payload["chosen"] = runs[0].task_ids[0]
    total = sum(len(s) for run in shards for s in run)
    inline = side is None or total <= INLINE_BYTES
    if side is not None:
        side.clear()
    parts = []
    if inline:
        for i, run in enumerate(shards):
            for k, blob in enumerate(run):
                safe = blob.replace("</", "<\\/")
                parts.append(f'<script type="application/json" id="task-shard-{i}-{k}">{safe}</script>')
    else:
        assert side is not None
        side.folder.mkdir(parents=True, exist_ok=True)
        payload["side"] = side.folder.name
        for i, run in enumerate(shards):
            for k, blob in enumerate(run):
                (side.folder / f"{SIDE_PREFIX}{i}-{k}.js").write_text(
                    f"memrlTaskShard({_json(f'{i}-{k}')},{blob});\n", encoding="utf-8")
    blob = _json(payload).replace("</", "<\\/")
    options = "".join(f'<option value="{i}">{html.escape(r.label)}</option>' for i, r in enumerate(runs))
    where = ("" if inline else f'<p class="note">memory texts are loaded from {html.escape(side.folder.name)}/ '
             "beside this page when a task is chosen (keep the two together)</p>")
    return (f'<label>run <select id="task-run">{options}</select></label> '
            f'<label>task <select id="task-select"></select></label>{where}'
            f'<div id="task-table"></div>'
            f'<script type="application/json" id="task-data">{blob}</script>{"".join(parts)}'
            f"<script>{TASK_JS}</script>")


TASK_JS = """
(function () {
  const data = JSON.parse(document.getElementById('task-data').textContent);
  const runSel = document.getElementById('task-run');
  const taskSel = document.getElementById('task-select');
  const out = document.getElementById('task-table');
  const loaded = {}, waiting = {};
  function esc(s) { const d = document.createElement('div'); d.textContent = String(s); return d.innerHTML; }
  window.memrlTaskShard = function (key, shard) {
    loaded[key] = shard;
    (waiting[key] || []).forEach(f => f(shard));
    delete waiting[key];
  };
  function withShard(run, task, done) {
    const at = data.runs[run].tasks.findIndex(t => t[0] === task);
    const key = run + '-' + Math.floor(Math.max(at, 0) / data.per);
    if (loaded[key]) return done(loaded[key]);
    const el = document.getElementById('task-shard-' + key);
    if (el) { loaded[key] = JSON.parse(el.textContent); return done(loaded[key]); }
    if (!data.side) return done({});
    if (waiting[key]) { waiting[key].push(done); return; }
    waiting[key] = [done];
    out.innerHTML = '<p class="note">loading ' + esc(data.side) + '/ ...</p>';
    const s = document.createElement('script');
    s.src = encodeURI(data.side) + '/task-' + key + '.js';
    s.onerror = () => { delete waiting[key]; out.innerHTML = '<p class="note">the memories of this task are in ' +
      esc(data.side) + '/, which is not beside this page</p>'; };
    document.head.appendChild(s);
  }
  function fillTasks() {
    const run = data.runs[runSel.value];
    taskSel.innerHTML = run.tasks.map(t => '<option value="' + esc(t[0]) + '">' + esc(t[1]) + '</option>').join('');
    if (run.tasks.some(t => t[0] === data.chosen)) taskSel.value = data.chosen;
    render();
  }
  function render() {
    const r = runSel.value, task = taskSel.value;
    withShard(r, task, shard => {
      if (runSel.value === r && taskSel.value === task) show(data.runs[r], shard[task] || []);
    });
  }
  function show(run, mems) {
    if (!mems.length) { out.innerHTML = '<p class="note">this task wrote no memory in this run</p>'; return; }
    let h = '<table class="mem"><thead><tr><th>memory</th><th>written</th><th>Q over time</th>' +
            '<th>helped</th><th>hurt</th><th>injected into</th><th>text</th></tr></thead><tbody>';
    for (const m of mems) {
      const used = m.used.map(u => {
        const effect = u[4] ? 'helped' : 'hurt', task = run.tasks[u[0]];
        return '<span class="' + effect + '">' + effect + ': ' + esc(task ? task[1] : '?') + ' e' + u[1] +
               ' (Q ' + (u[3] === null ? '?' : u[3].toFixed(3)) + ')</span>';
      }).join('<br>');
      h += '<tr class="memrow"><td>' + esc(m.id) +
           (m.removed ? '<br><i>removed in epoch ' + m.removed[0] + '</i>' : '') +
           '</td><td>epoch ' + m.epoch + ', ' + (m.success ? 'success' : 'failure') +
           (m.kind ? ', ' + esc(m.kind) : '') +
           '</td><td>' + esc(m.q_path.join(' → ')) + '</td><td>' + m.helped + '</td><td>' + m.hurt +
           '</td><td>' + (used || '<i>never injected</i>') + '</td><td><pre>' +
           esc(m.experience === null || m.experience === undefined ? '(text not recorded)' : m.experience) +
           '</pre></td></tr>';
    }
    out.innerHTML = h + '</tbody></table>';
  }
  runSel.addEventListener('change', fillTasks);
  taskSel.addEventListener('change', render);
  fillTasks();
})();
"""
