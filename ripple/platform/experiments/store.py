"""The result store: one Parquet dataset per experiment, keyed by (cell_id, sample_id).

Why part files: the driver writes every batch of records as soon as it arrives, each
batch as its own small Parquet file, written under a temporary name and renamed into
place. A SIGKILL therefore loses at most the samples still in flight, and never leaves
a half-written file behind. `compact` merges the small files of finished runs into one,
so the file count stays bounded. Reading deduplicates by key, so a crash between
writing a merged file and deleting its sources never shows a record twice.

Layout: <store>/<experiment>/records/{part,compact}-*.parquet
"""
from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, get_type_hints

import polars as pl

from ...errors import RippleError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True, kw_only=True)
class DecodeSettings:
    """How a cell decodes beyond model, task, decoder and hyperparameters. Grid cells, sweep specs
    and stored records all carry these, so one class holds the list (keyword-only, so a subclass
    keeps its own positional fields first)."""

    gen_length: int
    block_length: int
    cache: str
    seed: int
    dtype: str
    chat: bool
    split: str
    stop_at_eos: bool
    # end right after a decision that leaves the response complete up to an EOS (LLaDA2's
    # eos_early_stop); a cell id leaves it out when False, so earlier stores keep their ids
    eos_early_stop: bool = False

    def decode_settings(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(DecodeSettings)}


@dataclass(frozen=True, kw_only=True)
class SampleRecord(DecodeSettings):
    """One decoded and scored sample (DESIGN.md section 6), as stored and as sent by workers."""

    experiment: str
    cell_id: str
    sample_id: str
    model: str
    task: str
    decoder: str
    params: str  # JSON of every hyperparameter, defaults included
    prompt_tokens: int | None = None
    completion: str | None = None
    generated_tokens: int | None = None
    nfe: int | None = None
    lookahead_nfe: int | None = None
    decode_seconds: float | None = None
    tps: float | None = None
    canvas_tps: float | None = None
    correct: bool | None = None
    score: str | None = None  # JSON of the task's score details
    error: str | None = None  # set when decoding or scoring failed; the sample is then kept, not dropped
    worker_id: str | None = None
    hardware: str | None = None
    versions: str | None = None  # JSON: python, torch, ray, transformers, ripple
    weights: str | None = None  # weights_digest of the checkpoint that decoded it (None: stored before records carried it)
    run_id: str | None = None  # the driver invocation that computed this record
    finished_at: float | None = None  # unix seconds when the worker finished the sample
    # Throughput mode: the sample was decoded in one engine call with up to `batch_size` samples of
    # its cell. Tokens and NFE do not depend on it (`ripple.platform.experiments.equivalence`), timing does:
    # TPS counts batch-1 records only, throughput divides by the batches' wall time.
    batch_size: int = 1  # the setting that produced the record (a store written before it reads as 1)
    batch_id: str | None = None  # the engine call; its records share `batch_seconds`
    batch_seconds: float | None = None  # wall time of that call from its first forward to its last commit

    @property
    def key(self) -> tuple[str, str]:
        return self.cell_id, self.sample_id


def _schema() -> dict[str, pl.DataType]:
    """Parquet columns from SampleRecord's annotations: identity first, then settings, then results."""
    polars_type = {str: pl.String, int: pl.Int64, float: pl.Float64, bool: pl.Boolean}
    hints = get_type_hints(SampleRecord)
    settings = [f.name for f in fields(DecodeSettings)]
    own = [f for f in fields(SampleRecord) if f.name not in settings]
    ordered = ([f.name for f in own if f.default is MISSING] + settings
               + [f.name for f in own if f.default is not MISSING])
    return {n: polars_type[next(t for t in getattr(hints[n], "__args__", (hints[n],)) if t is not type(None))]
            for n in ordered}


SCHEMA: dict[str, pl.DataType] = _schema()
KEY = ["cell_id", "sample_id"]
# columns added after stores were first written, with the value a record written before them means
ADDED_COLUMNS: dict[str, Any] = {"batch_size": 1, "batch_id": None, "batch_seconds": None, "weights": None,
                                 "eos_early_stop": False}


def _conform(frame: pl.DataFrame) -> pl.DataFrame:
    """A part file in the current schema: columns it predates get their meaning as of then."""
    missing = [pl.lit(ADDED_COLUMNS[c], dtype=SCHEMA[c]).alias(c) for c in ADDED_COLUMNS if c not in frame.columns]
    return (frame.with_columns(missing) if missing else frame).select(list(SCHEMA))


def check_name(kind: str, name: str) -> str:
    """Experiment names become directory names: letters, digits, '.', '_', '-'."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise RippleError(f"{kind} name {name!r} is invalid; accepted: 1-128 letters, digits, '.', '_' or '-', "
                          f"starting with a letter or digit")
    return name


def to_frame(records: Iterable[SampleRecord]) -> pl.DataFrame:
    return pl.DataFrame([asdict(r) for r in records], schema=SCHEMA)


class ResultStore:
    """The Parquet records of one experiment. Only the grid driver writes; anyone may read."""

    def __init__(self, root: str | os.PathLike, experiment: str):
        self.root = Path(root).expanduser().resolve()
        self.experiment = check_name("experiment", experiment)
        self.dir = self.root / experiment / "records"
        self._seq = 0
        self._token = uuid.uuid4().hex[:12]

    def files(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("*.parquet") if not p.name.startswith("."))

    def _atomic_write(self, frame: pl.DataFrame, name: str) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / name
        tmp = self.dir / f".tmp-{name}"
        frame.write_parquet(tmp)
        os.replace(tmp, final)  # atomic on POSIX: a reader sees the whole file or none of it
        return final

    def append(self, records: Iterable[SampleRecord]) -> Path | None:
        """Write `records` now, as one small part file."""
        frame = to_frame(records)
        if frame.height == 0:
            return None
        self._seq += 1
        return self._atomic_write(frame, f"part-{self._token}-{self._seq:07d}.parquet")

    def read_all(self) -> pl.DataFrame:
        """Every stored row, duplicates included (for audits and tests)."""
        files = self.files()
        if not files:
            return pl.DataFrame(schema=SCHEMA)
        try:
            return pl.concat([_conform(pl.read_parquet(f)) for f in files], how="vertical")
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise RippleError(f"result store {self.dir} has an unreadable part file ({exc})") from None

    def read(self) -> pl.DataFrame:
        """One row per (cell_id, sample_id): a record without error wins, then the latest."""
        frame = self.read_all()
        if frame.height == 0:
            return frame
        return (frame.sort([pl.col("error").is_null(), pl.col("finished_at")], nulls_last=False)
                .unique(subset=KEY, keep="last", maintain_order=True)
                .sort(KEY))

    def done_keys(self) -> set[tuple[str, str]]:
        """Keys stored without error: a re-run skips these (and retries failed samples)."""
        frame = self.read_all().filter(pl.col("error").is_null()).select(KEY).unique()
        return set(zip(frame["cell_id"].to_list(), frame["sample_id"].to_list()))

    def check_weights(self, digests: Mapping[str, str | None], remedy: str) -> None:
        """Refuse to resume over samples that other weights decoded (a retrained ripple-tiny, an
        overwritten checkpoint directory): the run would mix two models' results under one cell id.
        `digests` maps a model name to its weights digest now; None (a hub id) is not checked."""
        frame = self.read_all().filter(pl.col("error").is_null())
        for model, digest in digests.items():
            if digest is None:
                continue
            other = frame.filter((pl.col("model") == model)
                                 & (pl.col("weights").is_null() | (pl.col("weights") != digest)))
            if other.height:
                seen = ", ".join(sorted({w or "unrecorded" for w in other["weights"].to_list()}))
                raise RippleError(f"experiment {self.experiment!r} holds {other.height} samples of {model} decoded "
                                  f"by other weights ({seen}; {model} is now {digest}): {remedy}")

    def compact(self) -> None:
        """Merge the small part files into one compact file (idempotent, crash-safe by dedup on read)."""
        parts = [p for p in self.files() if p.name.startswith("part-")]
        if len(parts) < 2:
            return
        merged = pl.concat([_conform(pl.read_parquet(p)) for p in parts], how="vertical").unique(maintain_order=True)
        self._atomic_write(merged, f"compact-{uuid.uuid4().hex[:12]}.parquet")
        for p in parts:
            p.unlink()
        for tmp in self.dir.glob(".tmp-*"):  # leftovers of a writer killed mid-write
            tmp.unlink()

    def clear(self) -> None:
        """Forget every stored record of this experiment (`ripple grid --fresh`)."""
        for p in list(self.dir.glob("*.parquet")) + list(self.dir.glob(".tmp-*")):
            p.unlink()


def dumps(value: Any) -> str:
    """Canonical JSON: sorted keys, so equal settings give equal strings and hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
