"""HLE questions: reading them (local parquet / JSONL / JSON, or `cais/hle` from the Hugging
Face hub), checking each row against HLE's schema, and choosing the subset a run uses.

Schema (one row per question): `id`, `question`, `answer`, `answer_type` (`exactMatch` or
`multipleChoice`), `category`, `raw_subject`, `image` (empty, or a data URL
`data:image/<type>;base64,...`; raw base64, `{"bytes": ...}` and http(s) URLs are accepted too).
Other columns (rationale, author_name, canary, image_preview, ...) are ignored.

A row that breaks the schema is skipped and reported (`LoadResult.skipped`, and one log
warning), never loaded half-way. Every selection is deterministic: rows are ranked by a hash
of (seed, purpose, id), so a question's membership does not depend on the other rows.

Order (`Selection.order`): "dataset" keeps the source's row order; "official" is the official
code's (MemTensor/MemRL memrl/run/hle_runner.py `_load`): the questions grouped by category,
the categories in order of first appearance, each group shuffled on its own by a fresh
`numpy.random.RandomState(order_seed).permutation` (what pandas `sample(frac=1,
random_state=42)` does), the groups concatenated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

ANSWER_TYPES = {"exactmatch": "exactMatch", "multiplechoice": "multipleChoice"}
COLUMNS = ("id", "question", "answer", "answer_type", "category", "raw_subject", "image")
_DATA_URL = re.compile(r"^data:image/([A-Za-z0-9.+-]+);base64,(.+)$", re.S)
_MAGIC = ((b"\x89PNG", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF8", "gif"),
          (b"RIFF", "webp"), (b"BM", "bmp"))


@dataclass(frozen=True)
class HLEQuestion:
    """One question, checked and normalised."""

    id: str
    question: str
    answer: str
    answer_type: str  # exactMatch | multipleChoice
    category: str
    raw_subject: str = ""
    image: str = ""  # "" or a data / http(s) URL

    @property
    def has_image(self) -> bool:
        return bool(self.image)

    def content_hash(self) -> str:
        """sha256 over everything that defines the question (for the run's data fingerprint)."""
        blob = json.dumps([self.id, self.question, self.answer, self.answer_type, self.image],
                          ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class Skipped:
    """A row that was not loaded, and why."""

    row: int
    id: str | None
    reason: str


@dataclass
class LoadResult:
    questions: list[HLEQuestion]
    skipped: list[Skipped] = field(default_factory=list)
    source: str = ""


class MalformedRow(ValueError):
    """A row that does not fit HLE's schema."""


# -- reading ------------------------------------------------------------------------------
def _read_jsonl(path: Path) -> Iterator[dict[str, Any] | Skipped]:
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield Skipped(row=i, id=None, reason=f"{path.name}:{i + 1}: not valid JSON ({exc.msg})")
                continue
            yield row if isinstance(row, dict) else Skipped(i, None, f"{path.name}:{i + 1}: not a JSON object")


def _read_json(path: Path) -> Iterator[dict[str, Any] | Skipped]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if isinstance(data, dict):  # {"id": row, ...} or {"rows": [...]}
        data = data.get("rows", list(data.values()))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of question objects")
    for i, row in enumerate(data):
        yield row if isinstance(row, dict) else Skipped(i, None, f"{path.name}[{i}]: not a JSON object")


def _read_parquet(path: Path) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ValueError(f"{path}: reading parquet needs pyarrow (pip install pyarrow); "
                         "or convert the file to JSONL") from exc
    pf = pq.ParquetFile(path)
    wanted = [c for c in COLUMNS if c in pf.schema_arrow.names]
    for batch in pf.iter_batches(batch_size=256, columns=wanted):
        yield from batch.to_pylist()


_READERS = {".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet}


def read_local(path: str | os.PathLike[str]) -> Iterator[dict[str, Any] | Skipped]:
    """Rows of a file, or of every .parquet/.jsonl/.json file in a folder (sorted by name)."""
    path = Path(path).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in _READERS)
        if not files:
            raise ValueError(f"{path}: no .parquet, .jsonl or .json files in this folder")
    else:
        if path.suffix not in _READERS:
            raise ValueError(f"{path}: unknown format (expected .parquet, .jsonl or .json)")
        files = [path]
    for f in files:
        yield from _READERS[f.suffix](f)


def read_hub(dataset: str, split: str, revision: str | None = None,
             token_env: str = "HF_TOKEN") -> Iterator[dict[str, Any]]:
    """Rows of a Hugging Face dataset (HLE is gated: the user's token, terms accepted)."""
    try:
        import datasets
    except ImportError as exc:
        raise ValueError("loading HLE from the hub needs the `datasets` package "
                         "(pip install datasets); or set env.data_path to a local copy") from exc
    token = os.environ.get(token_env) or None
    try:
        ds = datasets.load_dataset(dataset, split=split, revision=revision, token=token)
    except Exception as exc:
        offline = " HF_HUB_OFFLINE is set, so only the local hub cache is used." \
            if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False") else ""
        raise ValueError(
            f"could not load {dataset} (split {split}) from the Hugging Face hub: "
            f"{type(exc).__name__}: {exc}. The dataset is gated: accept its terms on "
            f"https://huggingface.co/datasets/{dataset} and set ${token_env} to a token of that "
            f"account (or `huggingface-cli login`).{offline} Alternatively download it once "
            "(python -m memrl_envs.hle.download) and set env.data_path.") from exc
    keep = [c for c in COLUMNS if c in ds.column_names]
    ds = ds.select_columns(keep)  # never decode image_preview / rationale_image
    for row in ds:
        yield dict(row)


# -- checking -----------------------------------------------------------------------------
def _sniff(raw: bytes) -> str | None:
    for magic, kind in _MAGIC:
        if raw.startswith(magic):
            return kind
    return None


def normalise_image(value: Any) -> str:
    """"" for no image, else a data URL or an http(s) URL; raises MalformedRow."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, Mapping):
        raw = value.get("bytes")
        if raw is None and value.get("path"):
            raise MalformedRow("image: a file path without its bytes")
        if not isinstance(raw, (bytes, bytearray)) or not raw:
            raise MalformedRow("image: a mapping without bytes")
        kind = _sniff(bytes(raw))
        if kind is None:
            raise MalformedRow("image: bytes of an unknown image format")
        return f"data:image/{kind};base64," + base64.b64encode(bytes(raw)).decode("ascii")
    if not isinstance(value, str):
        raise MalformedRow(f"image: unexpected value of type {type(value).__name__}")
    text = value.strip()
    if not text:
        return ""
    if text.startswith(("http://", "https://")):
        return text
    m = _DATA_URL.match(text)
    payload = re.sub(r"\s+", "", m.group(2) if m else text)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedRow("image: not a data URL and not base64" if not m
                           else "image: the data URL's base64 is corrupt") from exc
    if not raw:
        raise MalformedRow("image: empty image data")
    if m:
        return f"data:image/{m.group(1)};base64,{payload}"
    kind = _sniff(raw)
    if kind is None:
        raise MalformedRow("image: base64 of an unknown image format")
    return f"data:image/{kind};base64,{payload}"


def _text(row: Mapping[str, Any], name: str, required: bool = True) -> str:
    value = row.get(name)
    if isinstance(value, bool) or value is None or (isinstance(value, float) and math.isnan(value)):
        value = None
    elif isinstance(value, (int, float)):
        value = str(value)
    if value is not None and not isinstance(value, str):
        raise MalformedRow(f"{name}: expected text, got {type(value).__name__}")
    if required and not (value or "").strip():
        raise MalformedRow(f"{name}: missing or empty")
    return (value or "").strip()


def check_row(row: Mapping[str, Any]) -> HLEQuestion:
    """The row as an `HLEQuestion`; raises MalformedRow naming the first bad field."""
    qid = _text(row, "id")
    question = _text(row, "question")
    answer = _text(row, "answer")
    kind = _text(row, "answer_type")
    answer_type = ANSWER_TYPES.get(re.sub(r"[\s_-]", "", kind).lower())
    if answer_type is None:
        raise MalformedRow(f"answer_type: {kind!r} is neither exactMatch nor multipleChoice")
    return HLEQuestion(id=qid, question=question, answer=answer, answer_type=answer_type,
                       category=_text(row, "category"), raw_subject=_text(row, "raw_subject", False),
                       image=normalise_image(row.get("image")))


def check_rows(rows: Iterable[Mapping[str, Any] | Skipped]) -> tuple[list[HLEQuestion], list[Skipped]]:
    """Checked questions in input order, and the rows skipped (bad or duplicate ids)."""
    questions: list[HLEQuestion] = []
    skipped: list[Skipped] = []
    first_row: dict[str, int] = {}
    for i, row in enumerate(rows):
        if isinstance(row, Skipped):
            skipped.append(row)
            continue
        raw_id = row.get("id")
        shown_id = str(raw_id) if raw_id not in (None, "") else None
        try:
            q = check_row(row)
        except MalformedRow as exc:
            skipped.append(Skipped(row=i, id=shown_id, reason=str(exc)))
            continue
        if q.id in first_row:
            skipped.append(Skipped(row=i, id=q.id, reason=f"duplicate id (first at row {first_row[q.id]})"))
            continue
        first_row[q.id] = i
        questions.append(q)
    return questions, skipped


# -- choosing -----------------------------------------------------------------------------
def rank(seed: int, purpose: str, qid: str) -> float:
    """A number in [0, 1) fixed by (seed, purpose, id): the order deterministic picks use."""
    digest = hashlib.sha256(f"{seed}:{purpose}:{qid}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclass
class Selection:
    """Which questions a run keeps (applied in this order, each deterministic)."""

    categories: Sequence[str] | None = None
    modality: str = "all"  # all | text | image
    ratio: float | None = None  # fraction kept per category (at least one each)
    subset_size: int | None = None
    seed: int = 0
    split: str = "all"  # all | train | valid
    valid_fraction: float = 0.2
    task_ids: Sequence[str] | None = None
    max_tasks: int | None = None
    order: str = "dataset"  # dataset | official (module doc)
    order_seed: int = 42


def official_order(questions: Sequence[HLEQuestion], seed: int = 42) -> list[HLEQuestion]:
    """The official run order (module doc): per category, in order of first appearance, the
    category's questions permuted by a fresh RandomState(seed); the groups concatenated."""
    groups: dict[str, list[HLEQuestion]] = {}
    for q in questions:
        groups.setdefault(q.category, []).append(q)
    out: list[HLEQuestion] = []
    for group in groups.values():
        out.extend(group[i] for i in np.random.RandomState(seed).permutation(len(group)))
    return out


def select(questions: Sequence[HLEQuestion], sel: Selection) -> list[HLEQuestion]:
    """The chosen questions, in input order or the official one (`sel.order`, applied before
    `max_tasks`, as the official code takes its first N after the shuffle). Unknown
    categories or task ids raise ValueError."""
    chosen = list(questions)
    if sel.categories:
        known = sorted({q.category for q in chosen})
        by_lower = {c.lower(): c for c in known}
        wanted = set()
        for name in sel.categories:
            hit = by_lower.get(str(name).strip().lower())
            if hit is None:
                raise ValueError(f"categories: no question has category {name!r}; "
                                 f"the data has {known}")
            wanted.add(hit)
        chosen = [q for q in chosen if q.category in wanted]
    if sel.modality == "text":
        chosen = [q for q in chosen if not q.has_image]
    elif sel.modality == "image":
        chosen = [q for q in chosen if q.has_image]
    elif sel.modality != "all":
        raise ValueError(f"modality: {sel.modality!r} is not one of all, text, image")
    if sel.ratio is not None and sel.ratio < 1.0:
        keep: set[str] = set()
        for cat in sorted({q.category for q in chosen}):
            group = sorted((q for q in chosen if q.category == cat),
                           key=lambda q: rank(sel.seed, "ratio", q.id))
            keep.update(q.id for q in group[: max(1, int(len(group) * sel.ratio))])
        chosen = [q for q in chosen if q.id in keep]
    if sel.subset_size is not None and sel.subset_size < len(chosen):
        ordered = sorted(chosen, key=lambda q: rank(sel.seed, "subset", q.id))
        keep = {q.id for q in ordered[: sel.subset_size]}
        chosen = [q for q in chosen if q.id in keep]
    if sel.split != "all":
        def in_valid(q: HLEQuestion) -> bool:
            return rank(sel.seed, "split", q.id) < sel.valid_fraction

        chosen = [q for q in chosen if in_valid(q) == (sel.split == "valid")]
    if sel.task_ids is not None:
        present = {q.id for q in chosen}
        missing = [t for t in sel.task_ids if t not in present]
        if missing:
            raise ValueError(f"task_ids: not among the selected questions: {missing[:5]}")
        wanted_ids = set(sel.task_ids)
        chosen = [q for q in chosen if q.id in wanted_ids]
    if sel.order == "official":
        chosen = official_order(chosen, sel.order_seed)
    elif sel.order != "dataset":
        raise ValueError(f"order: {sel.order!r} is not one of dataset, official")
    if sel.max_tasks is not None:
        chosen = chosen[: sel.max_tasks]
    return chosen


def report_skipped(skipped: Sequence[Skipped], source: str) -> None:
    """One warning for all skipped rows, naming the first few."""
    if not skipped:
        return
    shown = "; ".join(f"row {s.row}" + (f" (id {s.id})" if s.id else "") + f": {s.reason}"
                      for s in skipped[:5])
    more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    log.warning("HLE %s: skipped %d malformed row(s): %s%s", source, len(skipped), shown, more)


def load(data_path: str | None = None, *, hf_dataset: str = "cais/hle", hf_split: str = "test",
         hf_revision: str | None = None, hf_token_env: str = "HF_TOKEN") -> LoadResult:
    """Every well-formed question of the source, with the skipped rows."""
    if data_path is not None:
        rows: Iterable[Mapping[str, Any] | Skipped] = read_local(data_path)
        source = str(data_path)
    else:
        rows = read_hub(hf_dataset, hf_split, hf_revision, hf_token_env)
        source = f"hf:{hf_dataset}/{hf_split}"
    questions, skipped = check_rows(rows)
    report_skipped(skipped, source)
    return LoadResult(questions=questions, skipped=skipped, source=source)
