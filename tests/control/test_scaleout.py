"""Scale-out: Hydra launchers (joblib sweep for real; Submitit and Ray by composing their
configs), the vLLM preset against an OpenAI-compatible stub server, and the Chroma server
backend against a real `chroma run` server."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tiny_env import TinyEnv, reply

from memrl.config.sections import RunnerSettings
from memrl.control.runner import Runner
from memrl.core.rundir import RunDir
from clients import make_client

from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.bank import SERVER_CLAIM, BankSettings
from memrl.memory.bankio import read_entries, resolve
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memory_state import snapshot

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
FIXTURE_CONFIGS = REPO / "tests" / "fixtures" / "configs"
EMB = HashingEmbedder(dim=32)


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        return hydra_compose("config", overrides=[f"hydra.searchpath=[file://{FIXTURE_CONFIGS}]",
                                                  "env=tiny", *overrides], return_hydra_config=True)


def has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


# ------------------------------------------------------------------------------ launchers
def sweep_cli(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
           "MEMRL_CACHE_DIR": str(tmp / "cache"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    base = ["-m", "env=tiny", "llm=scripted", "embedder=hashing", "env.retrieval.delta=0.0",
            "runner.progress=false", "runner.epochs=2", f"hydra.searchpath=[file://{FIXTURE_CONFIGS}]"]
    return subprocess.run([sys.executable, "-m", "memrl.cli", "run", *base, *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.skipif(not has("hydra_plugins.hydra_joblib_launcher"),
                    reason="hydra-joblib-launcher is not installed (pip extra `sweep`)")
def test_joblib_sweep_runs_every_job_in_parallel_processes(tmp_path):
    sweep = tmp_path / "sweep"
    out = sweep_cli(["hydra/launcher=parallel", "memory.lam=0,1", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Joblib.Parallel" in out.stdout + out.stderr  # the joblib launcher ran the jobs
    cards = sorted(sweep.glob(f"*/{RunDir.CARD}"))
    assert len(cards) == 2
    assert sorted(json.loads(c.read_text())["config"]["memory"]["lam"] for c in cards) == [0.0, 1.0]
    for c in cards:
        metrics = json.loads(RunDir(c.parent).metrics.read_text())
        assert metrics["n_tasks"] == 4 and metrics["epochs"] == 2
    launched = OmegaConf.load(sweep / "multirun.yaml")
    assert launched.hydra.launcher._target_.endswith("JoblibLauncher") and launched.hydra.launcher.n_jobs == 2


SLURM_KEYS = {"submitit_folder", "timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node",
              "mem_gb", "nodes", "name", "stderr_to_stdout", "partition", "qos", "comment",
              "constraint", "exclude", "gres", "cpus_per_gpu", "gpus_per_task", "mem_per_gpu",
              "mem_per_cpu", "account", "signal_delay_s", "max_num_timeout",
              "additional_parameters", "array_parallelism", "setup"}  # SlurmQueueConf, plugin 1.2.0


def test_slurm_launcher_config_text_uses_only_plugin_keys():
    """Checked without the plugin: the file extends the plugin's schema and sets only its keys."""
    raw = OmegaConf.load(CONFIGS / "hydra" / "launcher" / "slurm.yaml")
    assert list(raw.defaults) == ["submitit_slurm"]
    own = set(raw) - {"defaults"}
    assert own and own <= SLURM_KEYS, own - SLURM_KEYS
    assert raw.max_num_timeout >= 1  # a timed-out job is requeued and resumes its run


@pytest.mark.skipif(not has("hydra_plugins.hydra_submitit_launcher"),
                    reason="hydra-submitit-launcher is not installed (pip extra `slurm`); "
                           "only the config text is checked")
def test_slurm_launcher_composes_with_the_plugin_schema(tmp_path):
    from hydra.utils import get_class

    cfg = compose(["hydra/launcher=slurm", "hydra.launcher.partition=cpu", f"hydra.sweep.dir={tmp_path}"])
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert get_class(launcher._target_).__name__ == "SlurmLauncher"
    assert (launcher.partition, launcher.max_num_timeout, launcher.cpus_per_task) == ("cpu", 3, 4)
    assert launcher.submitit_folder == f"{tmp_path}/.submitit/%j"
    assert set(launcher) == SLURM_KEYS | {"_target_"}
    # a key the plugin does not know is refused when composing (the schema is in force)
    from hydra.errors import ConfigCompositionException
    with pytest.raises(ConfigCompositionException):
        compose(["hydra/launcher=slurm", "hydra.launcher.no_such_key=1"])


@pytest.mark.slow
@pytest.mark.skipif(not has("hydra_plugins.hydra_submitit_launcher"),
                    reason="hydra-submitit-launcher is not installed (pip extra `slurm`)")
def test_submitit_runs_a_job_through_its_local_executor(tmp_path):
    """No SLURM here: Submitit's local executor runs the job the way a SLURM node would
    (pickled task function, its own process, results collected by the launcher)."""
    sweep = tmp_path / "sweep"
    out = sweep_cli(["hydra/launcher=submitit_local", "memory.lam=0.5", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (card,) = sweep.glob(f"*/{RunDir.CARD}")
    assert json.loads(card.read_text())["config"]["memory"]["lam"] == 0.5
    assert RunDir(card.parent).metrics.exists()
    assert list((sweep / ".submitit").glob("*/*_result.pkl"))  # submitit collected the result


RAY_TARGET = "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"


def test_ray_launcher_config_composes_without_the_plugin(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    cfg = compose(["hydra/launcher=ray_cluster", f"hydra.sweep.dir={tmp_path}"])
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"] == RAY_TARGET
    assert set(launcher) == {"_target_", "ray"} and set(launcher["ray"]) == {"init", "remote"}
    assert launcher["ray"]["init"] == {"address": "ray://head:10001"}
    assert launcher["ray"]["remote"]["num_cpus"] >= 1


@pytest.mark.skipif(not has("hydra_plugins.hydra_ray_launcher"),
                    reason="hydra-ray-launcher is not installed (pip extra `ray`)")
def test_ray_launcher_config_matches_the_plugin_schema(tmp_path):
    from hydra.utils import get_class
    from hydra_plugins.hydra_ray_launcher._config import RayLauncherConf

    cfg = compose(["hydra/launcher=ray_cluster", f"hydra.sweep.dir={tmp_path}"])
    schema = OmegaConf.structured(RayLauncherConf)
    merged = OmegaConf.merge(schema, cfg.hydra.launcher)  # raises on a key the schema lacks
    assert merged._target_ == schema._target_ == RAY_TARGET
    assert get_class(RAY_TARGET).__name__ == "RayLauncher"  # importing it needs no ray


# ------------------------------------------------------------------------------ vLLM preset
class _OpenAIStub(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        text = f"pong from {body['model']}"
        out = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": text}}],
                          "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def test_vllm_preset_talks_to_an_openai_compatible_server(tmp_path, monkeypatch):
    from memrl.config.sections import LLMSettings
    from memrl.control.wiring import build_client

    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAIStub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("VLLM_MODEL", "org/served-model")
        monkeypatch.setenv("VLLM_API_BASE", f"http://127.0.0.1:{server.server_port}/v1")
        monkeypatch.setenv("VLLM_API_KEY", "k-123")
        cfg = compose(["llm=vllm", "llm.cache=false", "llm.max_retries=0"])
        settings = LLMSettings.model_validate(OmegaConf.to_container(cfg.llm, resolve=True))
        assert (settings.name, settings.backend, settings.model) == ("vllm", "litellm", "openai/org/served-model")
        client = build_client(settings)
        got = client.episode("s0/e1/t0", 0).complete("ping", purpose="act")
    finally:
        server.shutdown()
    assert got == "pong from org/served-model"
    (req,) = _OpenAIStub.seen[-1:]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer k-123"
    assert req["body"]["model"] == "org/served-model"


# ------------------------------------------------------------------------------ Chroma server
def _chroma_cli() -> str | None:
    here = Path(sys.executable).parent / "chroma"
    return str(here) if here.exists() else shutil.which("chroma")


@pytest.fixture
def chroma_server(tmp_path):
    cli = _chroma_cli()
    if cli is None:
        pytest.skip("no `chroma` CLI (chromadb's server) in this environment")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "chroma.log", "w")
    proc = subprocess.Popen([cli, "run", "--path", str(tmp_path / "server-data"), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"chroma server did not start: {(tmp_path / 'chroma.log').read_text()[-2000:]}")
                time.sleep(0.3)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _run(run_dir: Path, bank: BankSettings) -> MemRLMemory:
    memory = MemRLMemory(MemRLSettings(delta=0.0, k1=4, k2=2, bank=bank), bank_dir=RunDir(run_dir).bank,
                         embedder=EMB)
    env = TinyEnv(n_tasks=6)
    Runner(run_dir, env=env, memory=memory,
           llm=make_client(ScriptedBackend(reply), max_concurrency=2, max_retries=0),
           settings=RunnerSettings(epochs=2, batch_size=2, progress=False), seed=1,
           embed_intents=EMB.embed).run(env.tasks())
    return memory


def test_chroma_server_backend_matches_the_embedded_bank(tmp_path, chroma_server):
    served = BankSettings(host="127.0.0.1", port=chroma_server, collection="run-a")
    on_server = _run(tmp_path / "a", served)
    embedded = _run(tmp_path / "b", BankSettings())
    assert snapshot(on_server) == snapshot(embedded) and len(snapshot(on_server)) == 12
    assert not (RunDir(tmp_path / "a").bank / "chroma.sqlite3").exists()  # entries live in the server
    assert json.loads((RunDir(tmp_path / "a").bank / SERVER_CLAIM).read_text())["collection"] == "run-a"
    # the same run opened again (a resumed session) finds its memories on the server
    again = MemRLMemory(MemRLSettings(delta=0.0, k1=4, k2=2, bank=served), bank_dir=RunDir(tmp_path / "a").bank,
                        embedder=EMB)
    assert snapshot(again) == snapshot(embedded)
    # bank tools read a server-backed run over HTTP
    assert len(read_entries(resolve(tmp_path / "a"))) == 12
    # another run pointed at the same collection is refused instead of mixing memories
    with pytest.raises(ValueError, match="memory.bank.collection"):
        MemRLMemory(MemRLSettings(delta=0.0, k1=4, k2=2, bank=served), bank_dir=RunDir(tmp_path / "c").bank,
                    embedder=EMB)
