"""The result store: one Parquet dataset per experiment, keyed by (cell_id, sample_id).

Why part files: the driver writes every batch of records as soon as it arrives, each
batch as its own small Parquet file, written under a temporary name and renamed into
place. A SIGKILL therefore loses at most the samples still in flight, and never leaves
a half-written file behind. `compact` merges the small files of finished runs into one,
so the file count stays bounded. Reading deduplicates by key, so a crash between
writing a merged file and deleting its sources never shows a record twice.

A damaged file (truncated, or not Parquet at all) must not stop the experiment: reading
moves it into quarantine/ with one warning, and its samples count as missing, so the next
run recomputes them. Each file name carries its row count (`-n12.parquet`), which says how
many records a file held even when its footer is gone. A full disk stops the writer with
`StoreFull`; the file being written is removed, so a re-run after freeing space resumes.

Decode traces (a spec's `traces: true`) are a column of the same records, so they are written,
resumed, deduplicated and quarantined with them; a record without one (traces off, or a store
written before they existed) reads as None.

Layout: <store>/<experiment>/records/{part,compact}-*-n<rows>.parquet, quarantine/, driver.lock
"""
from __future__ import annotations

import errno
import io
import json
import logging
import os
import re
import uuid
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, get_type_hints

import polars as pl

from ...errors import RippleError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ROWS = re.compile(r"-n(\d+)\.parquet$")  # the row count in a record file's name
log = logging.getLogger(__name__)


class StoreFull(RippleError):
    """The store's disk is full: the driver stops with this line and a re-run resumes."""


def no_space(exc: BaseException) -> bool:
    """Whether `exc` is the OS saying the disk (or the user's quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def file_rows(path: Path) -> int | None:
    """How many records a (possibly damaged) record file holds: from its footer, else from its name."""
    try:
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # noqa: BLE001 -- any failure to read the footer means: ask the name instead
        found = _ROWS.search(path.name)
        return int(found.group(1)) if found else None


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
    # with chat on, the template's form (ripple.tasks.prompting.CHAT_FORMS). Chat was single-turn
    # before the form existed, so that is what a record without it means, and a cell id leaves it
    # out when single-turn: old ids keep their meaning and multi-turn cells get ids of their own
    chat_form: str = "singleturn"
    # JSON of the task's constructor options set by the spec (a code task's sandbox limits), sorted;
    # "{}" = the task's defaults, what every record before the key existed used (left out of ids)
    task_options: str = "{}"
    # where blocks start (generation.BLOCK_ALIGNS): `response` is what every record before the key meant
    # (left out of ids); `absolute` aligns a full-attention family's blocks to position 0 as dInfer does
    block_align: str = "response"
    # sub-blocks (generation.GenerationConfig.sub_block_length): None = the block length, what every record
    # before the key meant (left out of ids); a length that divides the block decodes it in sub-blocks
    sub_block_length: int | None = None

    def __post_init__(self):
        if self.sub_block_length is not None and self.sub_block_length == self.block_length:
            object.__setattr__(self, "sub_block_length", None)  # one sub-block per block: no sub-blocks, same cell

    def decode_settings(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(DecodeSettings)}

    @property
    def prompt_chat(self) -> str | bool:
        """What `encode_example` takes: False, or the chat form."""
        return self.chat_form if self.chat else False


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
    edits: int | None = None  # token edits (editing decoders; None: stored before records carried it)
    encoder_nfe: int | None = None  # of nfe, encoder passes (a uniform-noise family; None: stored before records carried it)
    # forwards of the decoder the oracle followed (issue 51), never in nfe; None for every other decoder
    # and for records stored before it
    reference_nfe: int | None = None
    # forwards of the decoder's second model (a verifier, issue 58), never in nfe; None for decoders without
    # one and for records stored before it
    verifier_nfe: int | None = None
    floor_nfe: int | None = None  # the task's floor for the sample (Task.floor_nfe; None: the task defines none)
    # the seed of the sample's own generator, sample_seed(seed, sample_id) (ripple/platform/experiments/
    # evaluate.py), when its decoder draws (renoise); None for the greedy mask decoders
    sample_seed: int | None = None
    decode_seconds: float | None = None
    tps: float | None = None
    canvas_tps: float | None = None
    correct: bool | None = None
    score: str | None = None  # JSON of the task's score details
    # ParallelBench's second figure (`score_strict` of the score details); None for other tasks and for
    # records stored before it
    score_strict: float | None = None
    error: str | None = None  # set when decoding or scoring failed; the sample is then kept, not dropped
    worker_id: str | None = None
    hardware: str | None = None
    versions: str | None = None  # JSON: python, torch, ray, transformers, ripple
    weights: str | None = None  # weights_digest of the checkpoint that decoded it (None: stored before records carried it)
    # JSON hyperparameter -> weights_digest of each second model the decoder ran beside the dLLM (a verifier,
    # ripple/platform/runtime/auxiliary.py); None for decoders without one and records stored before it
    aux_weights: str | None = None
    # JSON {"decoder"|"task": "distribution==version"} for a plugin decoder or task; None: Ripple's own
    plugins: str | None = None
    run_id: str | None = None  # the driver invocation that computed this record
    finished_at: float | None = None  # unix seconds when the worker finished the sample
    # Throughput mode: the sample was decoded in one engine call with up to `batch_size` samples of
    # its cell. Tokens and NFE do not depend on it (`ripple.bench.batch_equivalence`), timing does:
    # TPS counts batch-1 records only, throughput divides by the batches' wall time.
    batch_size: int = 1  # the setting that produced the record (a store written before it reads as 1)
    batch_id: str | None = None  # the engine call; its records share `batch_seconds`
    batch_seconds: float | None = None  # wall time of that call from its first forward to its last commit
    # the decode trace (ripple/platform/runtime/tracing.py `Trace.dumps`: every forward's commits with their
    # probabilities) when the grid keeps traces; None otherwise and in stores written before traces existed
    trace: str | None = None

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
                                 "eos_early_stop": False, "chat_form": "singleturn",
                                 "task_options": "{}", "block_align": "response", "plugins": None,
                                 "encoder_nfe": None, "sample_seed": None, "floor_nfe": None, "score_strict": None,
                                 "sub_block_length": None, "trace": None, "reference_nfe": None,
                                 "verifier_nfe": None, "aux_weights": None}
# decode settings among them: a cell at that value is the cell it was before the setting existed
ADDED_SETTINGS: tuple[str, ...] = tuple(f.name for f in fields(DecodeSettings) if f.name in ADDED_COLUMNS)


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
        self.quarantine = self.root / experiment / "quarantine"
        self._seq = 0
        self._token = uuid.uuid4().hex[:12]
        # record files already read, by (inode, size, mtime): a file is written once under its name (renamed
        # into place), so a driver re-reading the store as cells finish parses only the files new since
        self._parsed: dict[Path, tuple[tuple[int, int, int], pl.DataFrame]] = {}

    def files(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("*.parquet") if not p.name.startswith("."))

    def lock(self):
        """The driver lock of this experiment (one `ripple grid`/`ripple sweep` at a time)."""
        from .lock import DriverLock

        return DriverLock(self.root / self.experiment, f"experiment {self.experiment!r} in store {self.root}")

    def _atomic_write(self, frame: pl.DataFrame, prefix: str) -> Path:
        """Write `frame` under a temporary name and rename it into place; on any failure (a full disk,
        a signal) the temporary file is removed, so no half-written file is ever left."""
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / f"{prefix}-n{frame.height}.parquet"
        tmp = self.dir / f".tmp-{final.name}"
        buf = io.BytesIO()
        frame.write_parquet(buf)  # in memory first: a disk error then surfaces as a plain OSError
        try:
            with open(tmp, "wb") as f:
                f.write(buf.getbuffer())
            os.replace(tmp, final)  # atomic on POSIX: a reader sees the whole file or none of it
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if no_space(exc):
                raise StoreFull(f"result store {self.root} is full (no space left on device); "
                                f"{len(self.done_keys())} samples of experiment {self.experiment!r} are stored; "
                                f"free space and re-run to resume") from None
            raise
        return final

    def append(self, records: Iterable[SampleRecord]) -> Path | None:
        """Write `records` now, as one small part file."""
        frame = to_frame(records)
        if frame.height == 0:
            return None
        self._seq += 1
        return self._atomic_write(frame, f"part-{self._token}-{self._seq:07d}")

    def _read_known(self, path: Path) -> pl.DataFrame | None:
        """`_read_file`, once per version of the file (files gone since are forgotten)."""
        st = path.stat()  # FileNotFoundError: compacted away under a reader, as _read_file says
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        known = self._parsed.get(path)
        if known is not None and known[0] == key:
            return known[1]
        frame = self._read_file(path)
        if frame is not None:
            self._parsed[path] = (key, frame)
        return frame

    def _read_file(self, path: Path) -> pl.DataFrame | None:
        """One record file; a damaged one is moved into quarantine/ (None)."""
        try:
            return _conform(pl.read_parquet(path))
        except (pl.exceptions.ComputeError, pl.exceptions.SchemaError, pl.exceptions.ColumnNotFoundError) as exc:
            if not path.exists():
                raise FileNotFoundError(path) from None  # compacted away under a reader: not damage
            self._set_aside(path, exc)
            return None
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise RippleError(f"result store {self.dir}: cannot read {path.name} ({exc.strerror or exc})") from None

    def _set_aside(self, path: Path, exc: Exception) -> None:
        rows = file_rows(path)
        self.quarantine.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(path, self.quarantine / path.name)
        except FileNotFoundError:  # another reader moved it first
            return
        held = f"{rows} records" if rows is not None else "an unknown number of records"
        log.warning(f"damaged record file {path} ({str(exc).splitlines()[0][:120]}) moved to {self.quarantine}; "
                    f"it held {held}, which count as missing and are recomputed by the next run")

    def set_aside(self) -> tuple[int, int | None]:
        """(files, records) in quarantine/; records is None when some file's count is unknown."""
        files = sorted(self.quarantine.glob("*.parquet")) if self.quarantine.is_dir() else []
        rows = [file_rows(f) for f in files]
        return len(files), None if None in rows else sum(rows)

    def read_all(self) -> pl.DataFrame:
        """Every stored row, duplicates included (for audits and tests)."""
        files = self.files()
        frames = [f for f in (self._read_known(p) for p in files) if f is not None]
        self._parsed = {p: self._parsed[p] for p in files if p in self._parsed}  # forget compacted files
        if not frames:
            return pl.DataFrame(schema=SCHEMA)
        return pl.concat(frames, how="vertical")

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

    def check_aux_weights(self, remedy: str) -> None:
        """`check_weights` for the second models beside the dLLM (a verifier): each stored cell's `aux_weights`
        (hyperparameter -> digest) against the digest of the checkpoint its params name now; a hub id is not
        checked. Samples a replaced verifier decoded are refused as a replaced dLLM's are."""
        from ..runtime.checkpoints import local_weights_digest

        frame = self.read_all().filter(pl.col("error").is_null() & pl.col("aux_weights").is_not_null())
        now: dict[str, str | None] = {}

        def text(digests: dict) -> str:  # {"verifier": "abc"} -> verifier abc
            return " ".join(f"{k} {v}" for k, v in sorted(digests.items()))

        for (cell_id, params), rows in sorted(frame.group_by(["cell_id", "params"]), key=lambda g: g[0]):
            named = {hp: json.loads(params)[hp] for hp in json.loads(rows["aux_weights"][0])}
            for name in named.values():
                if name not in now:
                    now[name] = local_weights_digest(name)
            if any(now[n] is None for n in named.values()):
                continue
            expected = {hp: now[n] for hp, n in named.items()}
            other = rows.filter(pl.col("aux_weights") != json.dumps(expected, sort_keys=True))  # digests_json's form
            if other.height:
                seen = ", ".join(sorted({text(json.loads(w)) for w in other["aux_weights"].to_list()}))
                raise RippleError(f"experiment {self.experiment!r} holds {other.height} samples of cell {cell_id} "
                                  f"decoded beside other second-model weights ({seen}; now {text(expected)}): {remedy}")

    def compact(self) -> None:
        """Merge the small part files into one compact file (idempotent, crash-safe by dedup on read)."""
        parts = [p for p in self.files() if p.name.startswith("part-")]
        if len(parts) < 2:
            return
        frames = [(p, self._read_file(p)) for p in parts]
        parts = [p for p, f in frames if f is not None]
        if len(parts) < 2:
            return
        merged = pl.concat([f for _, f in frames if f is not None], how="vertical").unique(maintain_order=True)
        self._atomic_write(merged, f"compact-{uuid.uuid4().hex[:12]}")
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
