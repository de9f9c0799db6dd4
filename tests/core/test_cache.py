"""Caches live in one folder outside runs/ (memrl/core/cachedir.py): every config path derives from it,
moved caches keep hitting, and `memrl cache stats|clear` says what is there and deletes one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.cli import main as memrl_main
from memrl.config.sections import EmbedderSettings, LLMSettings
from memrl.core import cachedir
from memrl.llm.base import LLMRequest
from memrl.control.wiring import build_embedder
from memrl.llm.embed import CachedEmbedder, HashingEmbedder
from memrl.control.wiring import build_client
from memrl.llm.response_cache import ResponseCache

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        return compose("config", overrides=list(overrides))


def test_default_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(cachedir.ENV_VAR, raising=False)
    assert cachedir.default_cache_dir() == Path.home() / ".cache" / "memrl"
    monkeypatch.setenv(cachedir.ENV_VAR, "~/somewhere")
    assert cachedir.default_cache_dir() == Path.home() / "somewhere"
    monkeypatch.delenv(cachedir.DB_ENV_VAR, raising=False)
    assert cachedir.db_dir(tmp_path) == tmp_path / "mariadb"
    monkeypatch.setenv(cachedir.DB_ENV_VAR, str(tmp_path / "db"))
    assert cachedir.db_dir(tmp_path) == tmp_path / "db"


@pytest.mark.parametrize("env", ["alfworld", "bigcodebench", "lifelong_os", "lifelong_db", "hle"])
def test_every_config_path_derives_from_the_cache_folder(env, monkeypatch, tmp_path):
    monkeypatch.setenv(cachedir.ENV_VAR, str(tmp_path / "c"))
    monkeypatch.delenv(cachedir.DB_ENV_VAR, raising=False)
    root = str(tmp_path / "c")
    cfg = _cfg(f"env={env}")
    assert cfg.paths.cache_dir == root
    assert cfg.llm.cache_path == f"{root}/{cachedir.LLM_CACHE}"
    assert cfg.embedder.cache_path == f"{root}/{cachedir.EMBEDDING_CACHE}"
    if env == "hle":
        assert cfg.env.judge.cache_path == f"{root}/{cachedir.LLM_CACHE}"
    else:
        assert cfg.env.cache_dir == root
    if env == "lifelong_db":
        assert cfg.env.server_dir == f"{root}/{cachedir.DB_DIR}"
        monkeypatch.setenv(cachedir.DB_ENV_VAR, str(tmp_path / "db"))
        assert _cfg(f"env={env}").env.server_dir == str(tmp_path / "db")


@pytest.mark.parametrize("group", ["llm", "embedder"])
def test_every_preset_caches_in_the_cache_folder(group, monkeypatch, tmp_path):
    monkeypatch.setenv(cachedir.ENV_VAR, str(tmp_path))
    for preset in sorted(p.stem for p in (CONFIGS / group).glob("*.yaml")):
        node = _cfg(f"{group}={preset}")[group]
        if node.get("cache", False):
            want = cachedir.LLM_CACHE if group == "llm" else cachedir.EMBEDDING_CACHE
            assert node.cache_path == str(tmp_path / want), preset
    assert "runs" not in str(_cfg().paths.cache_dir).split(os.sep)


def test_owned_cache_names_are_the_ones_the_owners_write(monkeypatch, tmp_path):
    monkeypatch.setenv(cachedir.ENV_VAR, str(tmp_path))
    monkeypatch.delenv("MEMRL_ROOTFS_DIR", raising=False)
    from memrl_envs.alfworld import catalog, speedups
    from memrl_envs.lifelong.data import default_split_path
    from memrl_envs.lifelong_os.rootfs import rootfs_root

    owned = {n for c in cachedir.CACHES for n in c.names}
    written = [catalog.GameInfoCache(None).path, tmp_path / speedups.SAS_DIR_NAME,
               default_split_path("x.json", None, 0.3, 0), rootfs_root(),
               tmp_path / cachedir.MODELS_DIR, cachedir.db_dir()]
    for path in written:
        assert path.relative_to(tmp_path).parts[0] in owned, path


def test_a_moved_response_cache_keeps_hitting(tmp_path):
    """The key is the request, not the file's place: moving runs/.cache here keeps every hit."""
    old = tmp_path / "runs" / ".cache" / cachedir.LLM_CACHE
    cfg = {"name": "echo", "backend": "scripted", "model": "echo", "cache": True, "max_retries": 0}
    client = build_client(LLMSettings.model_validate({**cfg, "cache_path": str(old)}))
    req = LLMRequest(messages=(("user", "hello"),), max_tokens=8)
    assert client.complete(req).cached is False
    client.cache.close()
    new_root = tmp_path / "home_cache"
    new_root.mkdir()
    for p in old.parent.iterdir():  # what docs/run-directory.md says: mv runs/.cache/* <cache folder>/
        p.rename(new_root / p.name)
    moved = build_client(LLMSettings.model_validate({**cfg, "cache_path": str(new_root / cachedir.LLM_CACHE)}))
    resp = moved.complete(req)
    assert resp.cached is True and resp.text == "hello"


def test_a_moved_embedding_cache_keeps_hitting(tmp_path):
    a = tmp_path / "a" / cachedir.EMBEDDING_CACHE
    emb = CachedEmbedder(HashingEmbedder(dim=8), a)
    first = emb.embed(["one", "two"])
    emb.close()
    b = tmp_path / "b"
    a.parent.rename(b)
    again = build_embedder(EmbedderSettings(name="h", backend="hashing", dim=8, cache=True,
                                            cache_path=str(b / cachedir.EMBEDDING_CACHE)))
    assert (again.embed(["one", "two"]) == first).all() and (again.hits, again.misses) == (2, 0)


def _fill(root: Path) -> None:
    rc = ResponseCache(root / cachedir.LLM_CACHE)
    client = build_client(LLMSettings(name="echo", backend="scripted", model="echo", cache=False))
    for text in ("a", "b", "c"):
        req = LLMRequest(messages=(("user", text),))
        rc.put(text, client.complete(req))
    rc.close()
    for dim in (4, 8):
        e = CachedEmbedder(HashingEmbedder(dim=dim), root / cachedir.EMBEDDING_CACHE)
        e.embed(["x", "y"][: dim // 4])
        e.close()
    (root / "rootfs" / "debian").mkdir(parents=True)
    (root / "rootfs" / "debian" / "f").write_bytes(b"0" * 1000)
    (root / "stray.txt").write_text("?")


def test_inventory_counts_entries_and_sizes(tmp_path):
    _fill(tmp_path)
    rows = {r["target"]: r for r in cachedir.inventory(tmp_path)}
    assert rows["llm"]["entries"] == "3 responses" and rows["llm"]["bytes"] > 0
    assert rows["embeddings"]["entries"] == "1 x hashing-4, 2 x hashing-8"
    assert rows["rootfs"]["bytes"] == 1000 and rows["rootfs"]["entries"] == "1 files"
    assert rows["stray.txt"]["what"] == "not a memrl cache"
    assert "mariadb" not in rows


def test_cli_stats_and_clear_with_confirmation(tmp_path, capsys):
    _fill(tmp_path)
    assert memrl_main(["cache", "--dir", str(tmp_path), "stats"]) == 0
    out = capsys.readouterr().out
    assert "3 responses" in out and "embeddings" in out and "rootfs" in out
    # no --yes: says what would go, deletes nothing
    assert memrl_main(["cache", "--dir", str(tmp_path), "clear", "llm"]) == 1
    assert (tmp_path / cachedir.LLM_CACHE).exists() and "--yes" in capsys.readouterr().out
    assert memrl_main(["cache", "--dir", str(tmp_path), "clear", "llm", "--yes"]) == 0
    assert not any(tmp_path.glob("llm.sqlite*")) and (tmp_path / cachedir.EMBEDDING_CACHE).exists()
    assert memrl_main(["cache", "--dir", str(tmp_path), "clear", "nothing-here", "--yes"]) == 2
    assert "memrl: 'nothing-here'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the target is required
        memrl_main(["cache", "--dir", str(tmp_path), "clear"])


def test_clear_refuses_the_folder_of_a_live_database_server(tmp_path, capsys):
    db = tmp_path / cachedir.DB_DIR
    db.mkdir()
    (db / "mysqld.pid").write_text(str(os.getpid()))  # a live process owns the folder
    assert memrl_main(["cache", "--dir", str(tmp_path), "clear", "mariadb", "--yes"]) == 2
    assert "running" in capsys.readouterr().err and db.is_dir()
    (db / "mysqld.pid").unlink()
    assert memrl_main(["cache", "--dir", str(tmp_path), "clear", "mariadb", "--yes"]) == 0
    assert not db.exists()


def test_cli_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(cachedir.ENV_VAR, str(tmp_path))
    monkeypatch.delenv(cachedir.DB_ENV_VAR, raising=False)
    assert memrl_main(["cache", "path"]) == 0 and capsys.readouterr().out.strip() == str(tmp_path)
    assert memrl_main(["cache", "path", "mariadb"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "mariadb")
