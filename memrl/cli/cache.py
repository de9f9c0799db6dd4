"""`memrl cache stats|clear|path`: what the cache folder holds, and deleting one cachedir.

    stats [--json]             every cache present: its files, size and entries
    clear TARGET --yes         delete one cache (a target `stats` lists); without --yes it
                               only says what would be deleted
    path [TARGET]              the cache folder, or where one cache lives (e.g. `path mariadb`)
    prompt KEY [--json]        the prompt and the answer of one model call, by the key an
                               episode record lists for it (`model_calls[].key`)

The folder is $MEMRL_CACHE_DIR, else ~/.cache/memrl (`--dir` for another one); memrl/core/cachedir.py
says what each cache is and how to move an older checkout's runs/.cache here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from memrl.core import cachedir
from memrl.core.errors import cli_exit


def cmd_stats(args: argparse.Namespace) -> int:
    root = args.dir or cachedir.default_cache_dir()
    rows = cachedir.inventory(root)
    if args.json:
        print(json.dumps({"dir": str(root), "caches": rows}, indent=2))
        return 0
    print(f"{root}: {len(rows)} entr{'y' if len(rows) == 1 else 'ies'}, "
          f"{cachedir.human(sum(r['bytes'] for r in rows))}")
    for r in rows:
        print(f"  {r['target']:<16} {cachedir.human(r['bytes']):>10}  {r['entries']:<28} {r['what']}")
    old = Path.cwd() / cachedir.OLD_CACHE_DIR
    if old.is_dir() and old.resolve() != Path(root).resolve():
        print(f"note: {old} holds caches of the older layout; see memrl/core/cachedir.py to move them here")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    root = args.dir or cachedir.default_cache_dir()
    rows = {r["target"]: r for r in cachedir.inventory(root)}
    if args.target not in rows:
        raise cachedir.CacheError(f"{args.target!r}: not in {root} (it holds: {', '.join(sorted(rows)) or 'nothing'})")
    row = rows[args.target]
    if not args.yes:
        print(f"would delete {args.target} ({cachedir.human(row['bytes'])}, {row['entries']}):")
        for p in row["paths"]:
            print(f"  {p}")
        print("add --yes to delete it")
        return 1
    for p in cachedir.clear(args.target, root, is_live=cachedir.db_server_live):
        print(f"deleted {p}")
    return 0


def cmd_path(args: argparse.Namespace) -> int:
    root = args.dir or cachedir.default_cache_dir()
    if args.target is None:
        print(root)
    elif args.target == cachedir.DB_DIR:
        print(cachedir.db_dir(args.dir))
    elif args.target in cachedir.by_target():
        print(root / cachedir.by_target()[args.target].names[0])
    else:
        raise cachedir.CacheError(f"{args.target!r}: not a cache ({', '.join(cachedir.by_target())})")
    return 0


def cmd_prompt(args: argparse.Namespace) -> int:
    from memrl.llm.response_cache import ResponseCache

    root = args.dir or cachedir.default_cache_dir()
    path = root / cachedir.LLM_CACHE
    if not path.is_file():
        raise cachedir.CacheError(f"no response cache at {path}")
    rc = ResponseCache(path)
    try:
        found = rc.lookup(args.key)
    finally:
        rc.close()
    if found["request"] is None and found["response"] is None:
        raise cachedir.CacheError(f"{args.key}: not in {path}")
    if args.json:
        print(json.dumps(found, indent=2, ensure_ascii=False))
        return 0
    req, resp = found["request"], found["response"]
    if req is None:
        print("(the prompt was not kept: the answer was cached before the cache kept prompts)")
    else:
        print(f"model {req.get('model')}  max_tokens {req.get('max_tokens')}  "
              f"temperature {req.get('temperature')}  stop {req.get('stop')}")
        for role, content in req.get("messages", []):
            print(f"--- {role}")
            print(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
    print("--- answer")
    print("(no answer cached: the call failed)" if resp is None else resp["text"])
    return 0


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--dir", type=Path, default=None,
                   help="the cache folder (default: $MEMRL_CACHE_DIR or ~/.cache/memrl)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("stats", help="what each cache holds")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_stats)
    sp = sub.add_parser("clear", help="delete one cache")
    sp.add_argument("target", help="a target `stats` lists (llm, embeddings, models, ...)")
    sp.add_argument("--yes", action="store_true", help="really delete it")
    sp.set_defaults(fn=cmd_clear)
    sp = sub.add_parser("path", help="where the cache folder, or one cache, is")
    sp.add_argument("target", nargs="?", default=None)
    sp.set_defaults(fn=cmd_path)
    sp = sub.add_parser("prompt", help="the prompt and answer of one model call")
    sp.add_argument("key", help="a model call's key (an episode record's model_calls[].key)")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_prompt)
    return p


def main(argv: Sequence[str] | None = None, prog: str = "memrl cache") -> int:
    args = parser(prog).parse_args(argv)
    return cli_exit(lambda: args.fn(args), cachedir.CacheError, 2, prefix="memrl")


if __name__ == "__main__":
    sys.exit(main())
