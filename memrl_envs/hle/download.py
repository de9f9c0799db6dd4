"""Save HLE from the Hugging Face hub to one local parquet file, once, so runs read it with
`env.data_path=...` and need neither the network nor the token again.

    HF_HUB_OFFLINE=0 HF_TOKEN=hf_... python -m memrl_envs.hle.download --out data/hle/hle_test.parquet

`cais/hle` is gated: accept its terms on the dataset page with the account the token belongs
to. Rows are checked as a run checks them; malformed ones are reported and left out. Needs
the `datasets` and `pyarrow` packages.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from memrl_envs.hle.data import COLUMNS, check_rows, read_hub, report_skipped


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memrl_envs.hle.download", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="parquet file to write")
    ap.add_argument("--dataset", default="cais/hle")
    ap.add_argument("--split", default="test")
    ap.add_argument("--revision", default=None)
    ap.add_argument("--token-env", default="HF_TOKEN", help="environment variable holding the token")
    args = ap.parse_args(argv)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("memrl_envs.hle.download: needs pyarrow (pip install pyarrow datasets)", file=sys.stderr)
        return 2
    try:
        questions, skipped = check_rows(read_hub(args.dataset, args.split, args.revision, args.token_env))
    except ValueError as exc:
        print(f"memrl_envs.hle.download: {exc}", file=sys.stderr)
        return 2
    report_skipped(skipped, f"hf:{args.dataset}/{args.split}")
    if not questions:
        print("memrl_envs.hle.download: no well-formed questions", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = [{c: asdict(q)[c] for c in COLUMNS} for q in questions]
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(args.out)
    n_img = sum(q.has_image for q in questions)
    print(f"wrote {len(questions)} questions ({n_img} with an image; {len(skipped)} malformed rows "
          f"left out) to {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
