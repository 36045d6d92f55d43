"""`ripple learn label`: Learn2PD's training records, labelled by Ripple's engine on Ray workers.

Learn2PD (Bao et al., arXiv 2509.25188) trains its filter on what `generate_data` writes: per
prompt, a plain run gives the answer, then an "extremely greedy" run that knows the answer records,
for each of its forwards, the block's confidence vector and which positions' argmax already equals
the answer (the rules: ../shared/golden/README.md, "Learn2PD", `generate_data`). Here both runs are
the engine's: `Labeller` declares that it follows a reference, so the engine first decodes every
prompt with `learn2pd` at filter=none (the answer: Learn2PD's `generate`) and hands the labeller its
tokens; the labeller's step writes
each forward's record into the decision's trace keys. The labelling is a one-cell grid with traces
on, so it streams, resumes, runs on a cluster and shows progress as every grid does; at the end the
records are read back out of the stored traces, in prompt order, into one Parquet file.

`Labeller` is not registered: it is the labelling workflow's, not a decoder to rank (the cell names it
`local:learn2pd-label`, its id includes its source digest, so a changed rule never resumes).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...decoders.base import BlockState, Commit, Plan, RunShape, Scheduler
from ...decoders.features import LABEL_COLUMNS, raw_columns
from ...decoders.params import HyperParams, hp
from ...errors import RippleError
from ...lazy import torch

COLUMNS = ("sample_id", "block", "step", "confidence", "is_correct")  # Learn2PD's records
# beside them, the raw per-position columns learned filters of other recipes read (decoders/features.py)
EXTRA_COLUMNS = LABEL_COLUMNS
META_KEY = b"ripple.learn"  # the Parquet key-value metadata entry: how the records were made (JSON)
EXPERIMENT = "learn-label"  # the result store's experiment a labelling run stores into by default
WHERE = "(learn label)"  # the one-cell grid spec's name in its own refusals


@dataclass(frozen=True)
class StepsParams(HyperParams):
    steps: int = hp(0, 0, None, doc="forwards of the plain run in all, divided evenly among the blocks "
                    "(0: gen_length, one token per forward)")


def block_steps(params: StepsParams, shape: RunShape) -> None:
    """Refuse steps that the blocks cannot share evenly (LLaDA asserts it)."""
    for n in sorted(set(shape.n_blocks)) if params.steps else ():
        if params.steps % n:
            raise RippleError(f"steps={params.steps} must be a multiple of the number of blocks ({n}: gen_length "
                              f"{shape.gen_length} / block_length {shape.block_length})")


class Labeller(Scheduler):
    """`generate_data`'s labelling run on the plain run's answer (`BlockState.reference`). Per forward
    it records x0_p at the block's positions (float32, committed ones included; computed as `learn2pd`
    computes its filter's input, so a filter is trained on what it will read) and x0 == answer; then,
    if x0 equals the previous forward's x0 of this block everywhere, it fills the block with the answer
    (the block ends, no further forward); else it commits the answer wherever x0 already equals it.
    A forward matching nowhere commits nothing, so the next one repeats it and fills the block."""

    name = "learn2pd-label"
    Params = StepsParams
    follows_reference = True
    idle_steps = True
    supported_caches = ("none",)

    def reference_decoder(self) -> Scheduler:
        """The plain run: `learn2pd` without a filter (Learn2PD's `generate`: LLaDA's top-k floor by the
        argmax token's probability in the logits' dtype, ties as torch.topk breaks them there)."""
        from ...decoders.registry import build

        return build("learn2pd", {"filter": "none", "eot": "false", "steps": str(self.params.steps)})

    def prepare(self, shape: RunShape) -> None:
        block_steps(self.params, shape)

    def step(self, state: BlockState) -> Plan:
        answer = state.reference  # [L]
        if answer is None:
            raise RuntimeError("learn2pd-label: the engine handed no answer (a decoder that follows a reference)")
        x0 = state.logits.argmax(dim=-1)  # [L], the mask id included
        # the decoder's own features (decoders/features.py): confidence is the softmax in the logits' dtype,
        # float32 in learn2pd's fixed order; margin, entropy and is_committed for the other recipes
        cols = raw_columns(state.logits, state.masked)  # {name: [L]}
        info = {"confidence": cols["confidence"].tolist(), "is_correct": (x0 == answer).tolist(),
                **{name: cols[name].tolist() for name in EXTRA_COLUMNS}}
        previous = state.memory.get("x0")
        known = state.masked & (answer >= 0)  # [L]
        if previous is not None and torch.equal(previous, x0):
            take = known  # stalled: the whole block gets the answer
            info["fill"] = True
        else:
            take = known & (x0 == answer)
            state.memory["x0"] = x0
        pos = take.nonzero().squeeze(-1)  # [k]
        return Plan(Commit(pos, answer[pos]), info=info)


# ---------------------------------------------------------------------------- the records
@dataclass(frozen=True)
class TrainingRecord:
    """One forward of the labelling run: the filter's input row and its labels."""

    sample_id: str
    block: int
    step: int
    confidence: tuple[float, ...]  # float32 values
    is_correct: tuple[bool, ...]
    # the extra columns (EXTRA_COLUMNS), empty for records made without them
    margin: tuple[float, ...] = ()
    entropy: tuple[float, ...] = ()
    is_committed: tuple[bool, ...] = ()


def trace_records(sample_id: str, trace: str) -> list[TrainingRecord]:
    """A labelled sample's records from its stored decode trace, in forward order."""
    from ..runtime.tracing import Trace

    return [TrainingRecord(sample_id, d.block, d.step, tuple(d.info["confidence"]), tuple(d.info["is_correct"]),
                           *(tuple(d.info.get(name, ())) for name in EXTRA_COLUMNS))
            for d in Trace.loads(trace).decisions if "confidence" in d.info]


def records_frame(records: list[TrainingRecord]):
    """The records as the Parquet file holds them (confidence float32, is_correct bool), Learn2PD's five
    columns first; the extra ones (margin, entropy float32; is_committed bool) when every record has them."""
    import polars as pl

    schema = {"sample_id": pl.String, "block": pl.Int64, "step": pl.Int64, "confidence": pl.List(pl.Float32),
              "is_correct": pl.List(pl.Boolean)}
    data = [[r.sample_id for r in records], [r.block for r in records], [r.step for r in records],
            [list(r.confidence) for r in records], [list(r.is_correct) for r in records]]
    if records and all(len(getattr(r, name)) == len(r.confidence) for r in records for name in EXTRA_COLUMNS):
        for name in EXTRA_COLUMNS:
            schema[name] = pl.List(pl.Boolean if name == "is_committed" else pl.Float32)
            data.append([list(getattr(r, name)) for r in records])
    return pl.DataFrame(data, schema=schema, orient="col")


def write_records(records: list[TrainingRecord], out: Path, meta: dict[str, Any]) -> None:
    """Write the Parquet file whole or not at all (a temporary name, renamed into place), with `meta`
    (how the records were made) as its key-value metadata."""
    import pyarrow.parquet as pq

    table = records_frame(records).to_arrow()
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: json.dumps(meta).encode()})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- the workflow
@dataclass(frozen=True)
class Labelling:
    """What one `ripple learn label` did: the records written and the run that made them."""

    out: Path
    records: int
    prompts: int
    computed: int  # samples labelled by this invocation (the others were already stored)
    meta: dict[str, Any]


def task_list(task: str | list[str] | tuple[str, ...]) -> list[str]:
    """The tasks to label: a name, a comma list (`arith,pyfunc`) or a list; pooled in this order."""
    names = [t.strip() for t in (task.split(",") if isinstance(task, str) else task)]
    if not names or any(not t for t in names):
        raise RippleError(f"--task takes a task name or a comma list of them (arith,pyfunc), got {task!r}")
    if len(set(names)) < len(names):
        raise RippleError(f"--task names a task twice: {','.join(names)}")
    return names


def label_spec(model: str, task: str | list[str], *, split: str = "train", limit: int | None = None, gen_length: int = 48,
               block_length: int = 16, steps: int | None = None, dtype: str = "auto", data_dir: str | None = None,
               experiment: str = EXPERIMENT):
    """The grid that labels: `Labeller` on (model, task, split), one cell per task, traces kept, no cache,
    no stop."""
    from .spec import parse_spec

    if gen_length < 1 or block_length < 1:
        raise RippleError(f"gen_length and block_length must be positive, got {gen_length} and {block_length}")
    if gen_length % block_length:
        divisors = [d for d in range(1, gen_length + 1) if gen_length % d == 0]
        raise RippleError(f"gen_length {gen_length} is not divisible by block_length {block_length}; "
                          f"accepted block lengths: {', '.join(map(str, divisors))}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise RippleError(f"--steps must be a positive number of forwards, got {steps!r}")
    blocks = gen_length // block_length
    if steps is not None and steps % blocks:
        raise RippleError(f"--steps {steps} must be a multiple of the number of blocks ({blocks}: gen_length "
                          f"{gen_length} / block_length {block_length})")
    raw = {"experiment": experiment, "models": [model], "tasks": task_list(task), "split": split, "limit": limit,
           "decoders": [{"name": Labeller, "params": {"steps": 0 if steps in (None, gen_length) else steps}}],
           "gen_lengths": [gen_length], "block_lengths": [block_length], "caches": ["none"], "dtype": dtype,
           "traces": True}
    if data_dir is not None:
        raw["data_dir"] = data_dir
    try:
        spec = parse_spec(raw, WHERE)
    except RippleError as exc:  # the spec is ours, not the user's: name the problem, not a spec
        raise RippleError(str(exc).removeprefix(f"grid spec {WHERE}: ")) from None
    return spec


def label(model: str, task: str | list[str], out: str | os.PathLike, *, split: str = "train", limit: int | None = None,
          gen_length: int = 48, block_length: int = 16, steps: int | None = None, dtype: str = "auto",
          data_dir: str | None = None, store: str | os.PathLike | None = None, experiment: str = EXPERIMENT,
          workers: int | None = None, progress: bool = False, fresh: bool = False) -> Labelling:
    """Label the first `limit` examples of `task`'s `split` with `model` and write the records to `out`.
    Several tasks (a comma list or a list) are labelled as one grid, `limit` each, and pooled into one
    file in the order given (the metadata's `task` names them all, `tasks` counts each one's prompts)."""
    from .grid import default_store, planned_rows, plan, run_grid

    spec = label_spec(model, task, split=split, limit=limit, gen_length=gen_length, block_length=block_length,
                      steps=steps, dtype=dtype, data_dir=data_dir, experiment=experiment)
    names = task_list(task)
    items = plan(spec, experiment)  # the examples load here: a bad split is refused before Ray starts
    for name in names:
        if not any(it.cell.task == name for it in items):
            raise RippleError(f"task {name!r} has no {split!r} examples to label")
    run = run_grid(spec, Path(store).expanduser() if store is not None else default_store(), experiment=experiment,
                   track=False, fresh=fresh, progress=progress, workers=workers)
    rows = planned_rows(items, run.store.read())
    by_id = {(row["cell_id"], row["sample_id"]): row for row in rows.iter_rows(named=True)}  # ids are per task

    def key(it):
        return it.cell.cell_id, it.example.id

    failed = [(it.example.id, by_id[key(it)]["error"]) for it in items
              if key(it) in by_id and by_id[key(it)]["error"] is not None]
    missing = [it.example.id for it in items if key(it) not in by_id]
    if failed or missing:
        first = f"{failed[0][0]}: {failed[0][1]}" if failed else missing[0]
        raise RippleError(f"{len(failed) + len(missing)} of {len(items)} samples were not labelled (first: {first}); "
                          f"nothing written to {out}; re-run the same command to retry them")
    per_item = [trace_records(it.example.id, by_id[key(it)]["trace"]) for it in items]
    records = [r for recs in per_item for r in recs]
    digest = by_id[key(items[0])]["weights"]  # the workers' 12-digit weights digest
    meta = {"model": model, "weights": digest, "weights_sha256": weights_sha256(model) or digest,
            "task": ",".join(names), "split": split, "prompts": len(items), "records": len(records),
            "gen_length": gen_length, "block_length": block_length, "steps": steps or gen_length, "dtype": dtype,
            "cell_id": ",".join(c.cell_id for c in spec.cells), "experiment": experiment}
    if len(names) > 1:  # each task's share of the pooled prompts and records
        meta["tasks"] = {name: {"prompts": sum(1 for it in items if it.cell.task == name),
                                "records": sum(len(recs) for it, recs in zip(items, per_item) if it.cell.task == name)}
                         for name in names}
    write_records(records, Path(out), meta)
    return Labelling(Path(out), len(records), len(items), run.computed, meta)


def weights_sha256(model: str) -> str | None:
    """The full sha256 of a local model's weights (`loading.weights_sha256`); None for a hub id (whose
    weights only the workers hold: their 12-digit digest stands in)."""
    from ..runtime.checkpoints import EMBEDDED, resolve_model_dir
    from ..runtime.checkpoints import weights_sha256 as digest

    path = resolve_model_dir(model) if model in EMBEDDED else Path(model).expanduser()
    return digest(path) if path.is_dir() else None
