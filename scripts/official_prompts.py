"""Show, per benchmark, the prompt an official-mode episode sends with two injected memories:
one written after a success, one after a failure, both by the official writer, from real
episodes of the benchmark's environment, with every model played by the provider emulation
(memrl.testing.fault_server, `provider=True`).

For each benchmark, two runs of `experiment=<bench>_official` on one task:
  1. the benchmark's oracle agent (ALFWorld's expert, BigCodeBench's canonical solution,
     HLE's and Lifelong's gold answer) plays it once: a success, whose memory the official
     writer writes (the emulated gpt model answers the script call);
  2. a run seeded with that bank (`memory.bank.init_from`) in which the emulated model plays:
     epoch 1 retrieves the success memory and fails (the emulation does not solve these
     tasks; ALFWorld and Lifelong get one or two steps), which writes a failure memory; epoch 2
     retrieves both, under the official display. Its first model call is printed as sent.

    python scripts/official_prompts.py [--bench alfworld bcb hle llb_os llb_db] [--out DIR]

Needs what each benchmark's e2e tests need (../shared/data, the BigCodeBench checker and a
sandbox, MariaDB, the Lifelong-OS root file system); a benchmark that cannot run is reported
and skipped. Writes DIR/<bench>.txt (the messages) and prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
HLE_FIXTURE = ROOT / "tests" / "fixtures" / "hle" / "hle_fixture.jsonl"
BCB_DATA = SHARED / "bigcodebench" / "bigcodebench_hard_train.jsonl"
KEYS = {"OPENAI_API_KEY": "sk-emulated", "GEMINI_API_KEY": "gm-emulated"}
FIRST_CALL = {"alfworld": "act", "bcb": "code", "hle": "answer", "llb_os": "act", "llb_db": "act"}


def bench_args(bench: str, server, tmp: Path) -> tuple[list[str], str, dict[str, str]] | str:
    """(overrides, oracle agent, extra environment) for one benchmark, or why it cannot run."""
    llm = [f"llm.api_base={server.api_base}", f"embedder.api_base={server.api_base}"]
    if bench == "alfworld":
        if not (SHARED / "alfworld").is_dir():
            return f"no ALFWorld data at {SHARED / 'alfworld'}"
        return (["experiment=alfworld_official", "env.split=valid_seen", "env.max_tasks=1", *llm],
                "expert", {"ALFWORLD_DATA": str(SHARED / "alfworld")})
    if bench == "bcb":
        from memrl_envs.sandbox import bwrap_available

        why = bwrap_available()
        if why or not BCB_DATA.is_file():
            return why or f"no BigCodeBench data at {BCB_DATA}"
        return (["experiment=bcb_official", f"env.data_path={BCB_DATA}", "env.part=all",
                 "env.task_ids=[BigCodeBench/19]", "env.time_limit_s=20", *llm], "canonical", {})
    if bench == "hle":
        return (["experiment=hle_official", f"env.data_path={HLE_FIXTURE}", "env.modality=text",
                 "env.max_tasks=1", f"llm.api_base={server.gemini_base}",
                 f"env.judge.api_base={server.api_base}", f"embedder.api_base={server.api_base}"],
                "gold", {})
    if bench in ("llb_os", "llb_db"):
        data = SHARED / "lifelong"
        # ../shared/data has the train files only: the official task set's val file is not here
        args = [f"experiment={bench}_official", "env.max_tasks=1", "env.val_path=null", *llm]
        extra = {"LIFELONG_DATA": str(data)}
        if bench == "llb_os":
            from memrl_envs.lifelong_os.rootfs import is_built, rootfs_path
            from memrl_envs.lifelong_os.shell import overlay_available

            rootfs = rootfs_path()
            why = overlay_available() or (None if is_built(rootfs) else f"{rootfs} is not built (make rootfs)")
            if why:
                return f"no Lifelong-OS sandbox: {why}"
            extra["MEMRL_ROOTFS_DIR"] = str(rootfs.parent)
            return args, "gold", extra
        from memrl_envs.lifelong_db.server import find_binary

        if find_binary("mariadbd", "mysqld") is None:
            return "no MariaDB server binary"
        return [*args, "env.prompt_rows=2", f"env.server_dir={tmp / 'mariadb'}"], "gold", extra
    return f"unknown benchmark {bench!r}"


def run(args: list[str], run_dir: Path, tmp: Path, extra: dict[str, str]) -> None:
    environ = dict(os.environ, MEMRL_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
                   NO_PROXY="127.0.0.1,localhost", **KEYS, **extra)
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args, "runner.progress=false",
                          f"hydra.run.dir={run_dir}"], env=environ, capture_output=True, text=True,
                         timeout=1800, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"memrl.control.session {' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}")


def render(messages: list) -> str:
    parts = []
    for role, content in messages:
        if not isinstance(content, str):  # text and image parts
            content = "\n".join(p.get("text", "[image]") if isinstance(p, dict) else str(p) for p in content)
        parts.append(f"----- {role} -----\n{content}")
    return "\n".join(parts)


def show(bench: str, server, out_dir: Path) -> str:
    from memrl.core.rundir import RunDir
    from memrl.llm.response_cache import ResponseCache

    with tempfile.TemporaryDirectory(prefix=f"official-{bench}-") as t:
        tmp = Path(t)
        spec = bench_args(bench, server, tmp)
        if isinstance(spec, str):
            return f"{bench}: skipped ({spec})"
        args, oracle, extra = spec
        if bench == "llb_db":
            from memrl_envs.lifelong_db.server import MariaDBServer

            with MariaDBServer(tmp / "mariadb"):
                return _two_runs(bench, args, oracle, extra, tmp, out_dir, RunDir, ResponseCache)
        return _two_runs(bench, args, oracle, extra, tmp, out_dir, RunDir, ResponseCache)


def _two_runs(bench, args, oracle, extra, tmp, out_dir, RunDir, ResponseCache) -> str:
    short = ["env.max_steps=2"] if bench in ("alfworld", "llb_os", "llb_db") else []
    run([*args, f"agent={oracle}", "runner.epochs=1"], tmp / "oracle", tmp, extra)
    run([*args, *short, "runner.epochs=2", f"memory.bank.init_from={tmp / 'oracle'}"], tmp / "model", tmp, extra)
    records = [json.loads(x) for x in RunDir(tmp / "model").episodes.read_text().splitlines()]
    second = next(r for r in records if r["epoch"] == 2)
    injected = [(m["id"], round(m["q"], 3)) for m in second["injected"]]
    call = next(c for c in second["model_calls"] if c.get("purpose") == FIRST_CALL[bench])
    cache = ResponseCache(tmp / "cache" / "llm.sqlite")
    request = cache.get_request(call["key"])
    cache.close()
    head = (f"# {bench}: epoch-2 episode of task {second['task_id']}, injected {injected} "
            f"(epoch 1: {'success' if records[0]['success'] else 'failure'})\n")
    text = head + render(request["messages"])
    (out_dir / f"{bench}.txt").write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    from memrl.testing.fault_server import FaultServer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", nargs="+", default=["alfworld", "bcb", "hle", "llb_os", "llb_db"])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "official_prompts")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    with FaultServer(provider=True) as server:
        for bench in a.bench:
            print(show(bench, server, a.out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
