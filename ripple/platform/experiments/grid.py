"""`ripple grid`: run a grid spec on a pool of Ray workers, resumably.

The driver plans every (cell, sample) of the spec, skips the keys already in the result
store, and streams the rest to workers in batches of up to `batch_size` samples of one
cell (throughput mode; 1 by default): each worker has at most `DEPTH` batches in flight,
and results are consumed in completion order with `ray.wait`, each batch's records
written to the store the moment they arrive. Grids over several models run one worker
pool per model, one after the other. At the end every cell is summarised from the
store (so samples from earlier, interrupted runs count) and logged to MLflow.

With no cluster address (`RAY_ADDRESS`), Ray starts in-process on loopback; under
`ray job submit` the same command joins the job's cluster.
"""
from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import polars as pl

from ...errors import RippleError, Terminated, signals_deferred, stop_on_sigterm
from .spec import Cell, GridSpec, WorkerSpec, load_spec, parse_spec, shipped_specs  # noqa: F401 (re-exported)
from .metrics import (VERIFIER_RULE, CellSummary, baseline_ids, oracle_ids, ratio_text, strict_text,
                      summarize_cells)
from .store import KEY, ResultStore, SampleRecord, StoreFull
from .workers import WorkItem

DEPTH = 2  # batches in flight per worker: one decodes while the one before is scored (or the next waits)
COMPACT_EVERY = 256  # merge part files after this many, so a long grid leaves few files
DIED = "worker died"  # error prefix of a sample whose worker died after its last restart


def default_store() -> Path:
    """$RIPPLE_STORE, else ./results; inside a submitted Ray job the working directory is a
    temporary copy, so there the default is ~/ripple-results on the head node."""
    if os.environ.get("RIPPLE_STORE"):
        return Path(os.environ["RIPPLE_STORE"]).expanduser()
    if os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):  # set by Ray's job supervisor for the entrypoint
        return Path.home() / "ripple-results"
    return Path("results")


@dataclass
class GridRun:
    """What one `ripple grid` invocation did."""

    spec: GridSpec
    store: ResultStore
    run_id: str
    planned: int  # (cell, sample) keys in the grid
    skipped: int  # already stored without error before this run
    computed: int  # records written by this run
    summaries: list[CellSummary] = field(default_factory=list)
    pools: list[list[dict]] = field(default_factory=list)  # each pool's worker infos: one per (model, dtype), in turn
    seconds: float = 0.0  # the whole invocation
    startup_seconds: float = 0.0  # Ray start (or connect) and worker model loads
    stream_seconds: float = 0.0  # from workers ready to the last record stored

    @property
    def workers(self) -> list[dict]:
        """Every worker started, over all pools."""
        return [w for pool in self.pools for w in pool]

    def table(self) -> pl.DataFrame:
        """One row per cell, in spec order: its id, settings (params as JSON) and numbers (as the grid's
        table and `--json` have them)."""
        rows = [{"cell_id": s.cell_id, **s.cell.settings, "params": s.cell.params_json, **s.metrics()}
                for s in self.summaries]
        return pl.from_dicts(rows, infer_schema_length=None) if rows else pl.DataFrame()


# ---------------------------------------------------------------------------- planning
def plan(spec: GridSpec, experiment: str | None = None, run_id: str | None = None) -> list[WorkItem]:
    """Every (cell, example) of the grid, in spec order; examples load once per (task, split, limit)."""
    from ...tasks import get_task

    experiment = experiment or spec.experiment
    run_id = run_id or uuid.uuid4().hex[:12]
    tasks: dict[str, Any] = {}
    examples: dict[tuple, list] = {}
    items = []
    for cell in spec.cells:
        if cell.task not in tasks:
            tasks[cell.task] = get_task(cell.task, data_dir=spec.data_dir)
        key = (cell.task, cell.split, cell.limit)
        if key not in examples:
            examples[key] = tasks[cell.task].examples(cell.split, cell.limit)
        items += [WorkItem(experiment, run_id, cell, ex, spec.traces) for ex in examples[key]]
    return items


def model_digests(models: Iterable[str]) -> dict[str, str | None]:
    """The weights digest of each model as the driver sees it now (None for a hub id)."""
    from ..runtime.checkpoints import local_weights_digest

    return {m: local_weights_digest(m) for m in sorted(set(models))}


# ---------------------------------------------------------------------------- Ray
def connect_ray() -> bool:
    """Join the cluster named by RAY_ADDRESS, or start Ray in-process on loopback. True if started here."""
    import ray

    if ray.is_initialized():
        return False
    # workers print nothing by design (a failure is in the sample's record); without this, Ray
    # would also echo their warnings and retried-task tracebacks on the driver's terminal
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    if os.environ.get("RAY_ADDRESS"):
        _init(address=os.environ["RAY_ADDRESS"], **quiet)
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a local benchmark run reports nothing home
    _init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, _node_ip_address="127.0.0.1", **quiet)
    return True


def _init(**kwargs: Any) -> None:
    """`ray.init`, stopping on SIGTERM as a driver does everywhere else: ray.init installs its own
    handler first thing (a bare sys.exit with the signal number), so a SIGTERM during start-up would
    exit 15; it becomes `Terminated`, and ours is put back once Ray is up. Interrupted, what start-up
    got to start is shut down (node agents it had not handed over yet exit by themselves later)."""
    import ray

    try:
        ray.init(**kwargs)
    except BaseException as exc:
        ray.shutdown()
        if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM:
            raise Terminated() from None
        raise
    finally:
        stop_on_sigterm()


@contextmanager
def ray_driver(store: ResultStore) -> Iterator[None]:
    """Ray for one driver (grid or sweep), and what every way out of it owes the store: part files
    merged (after a signal or failure quietly, since the error in flight is the one to report; not
    at all on a full disk, where a merged copy would not fit either), Ray shut down if started here."""
    started_here = connect_ray()
    try:
        yield
    except BaseException as exc:
        if not isinstance(exc, StoreFull):
            _compact_quietly(store)
        raise
    else:
        store.compact()
    finally:
        if started_here:
            import ray

            ray.shutdown()


def pool_shape(workers: WorkerSpec, override_count: int | None, needed: int) -> tuple[int, float, float]:
    """(count, cpus, gpus) per worker: `gpus` GPUs each where the cluster has GPUs (or the spec asks
    for them: an autoscaling cluster adds GPU nodes for pending workers), else `cpus` CPUs each."""
    import ray

    total = ray.cluster_resources()
    gpus = total.get("GPU", 0.0)
    use_gpu = workers.device == "gpu" or (workers.device == "auto" and gpus >= workers.gpus)
    if use_gpu:
        count, num_gpus = int(gpus // workers.gpus), float(workers.gpus)
    else:
        count, num_gpus = int(total.get("CPU", 1.0) // workers.cpus), 0.0
    count = override_count or workers.count or max(1, count)
    return max(1, min(count, needed)), float(workers.cpus), num_gpus


class WorkerPool:
    """The worker actors of one model, ready (model loaded) once constructed. An actor whose
    restarts are exhausted is set to None and gets no more samples."""

    def __init__(self, model: str, dtype: str, data_dir: str | None, workers: WorkerSpec, count: int,
                 cpus: float, gpus: float, weights: str | None = None):
        import ray

        from .workers import ray_worker_class

        cls = ray_worker_class(cpus, gpus, workers.max_restarts, concurrency=DEPTH)
        device = "cuda" if gpus else "cpu"
        self.actors = [cls.remote(model, dtype=dtype, device=device, threads=max(1, int(cpus)), data_dir=data_dir,
                                  weights=weights) for _ in range(count)]
        try:
            # one get waits for every model load; no retries: a worker that cannot load its model never will
            self.infos = ray.get([a.info.options(max_task_retries=0).remote() for a in self.actors])
        except ray.exceptions.RayError as exc:
            self.close()
            raise RippleError(f"workers for model {model!r} failed to start: {root_cause(exc)}") from None

    def close(self) -> None:
        import ray

        for actor in self.actors:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        self.actors = []


def root_cause(exc: BaseException) -> str:
    """The innermost error message of a Ray error, on one line (a RippleError's text when there is one)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for line in reversed(lines):
        if line.startswith("ripple.errors.RippleError:"):
            return line.split(":", 1)[1].strip()
    return lines[-1] if lines else type(exc).__name__


def batches(items: list[WorkItem], batch_size: int) -> list[list[WorkItem]]:
    """`items` cut into batches of at most `batch_size` samples of one cell, in plan order."""
    by_cell: dict[str, list[WorkItem]] = {}
    for it in items:
        by_cell.setdefault(it.cell.cell_id, []).append(it)
    return [group[i:i + batch_size] for group in by_cell.values() for i in range(0, len(group), batch_size)]


class Stopped(Exception):
    """`stream_items` was asked to stop: the records already returned are stored, the rest abandoned."""


def stream_items(pool: WorkerPool, items: list[WorkItem], sink: Callable[[list[SampleRecord]], None],
                 batch_size: int = 1, stop: Any = None) -> None:
    """Send `items` to the pool in batches of up to `batch_size` samples of one cell, at most DEPTH
    batches in flight per worker; hand each batch's records to `sink` as soon as it finishes.
    `stop` (an ObjectRef) is for callers no signal reaches, a sweep's trials in their Ray actors:
    once it is ready the records that came back with it are stored and `Stopped` is raised."""
    import ray

    queue = deque(batches(items, batch_size))
    inflight: dict[Any, tuple[int, list[WorkItem]]] = {}

    def feed(slot: int) -> None:
        if queue and pool.actors[slot] is not None:
            batch = queue.popleft()
            inflight[pool.actors[slot].run_batch.remote(batch, batch_size)] = (slot, batch)

    for _ in range(DEPTH):
        for slot in range(len(pool.actors)):
            feed(slot)
    while inflight:
        ready, rest = ray.wait(list(inflight) + ([stop] if stop is not None else []), num_returns=1)
        with signals_deferred():  # records that came back are stored (and their cells logged) before a stop
            if rest:  # take everything else that is already finished, without waiting
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                ready += more
            stopped = stop is not None and stop in ready
            ready = [ref for ref in ready if ref in inflight]
            records = []
            for ref, batch_records in zip(ready, _results(ready, inflight, batch_size)):
                slot, _ = inflight.pop(ref)
                if any(r.error is not None and r.error.startswith(DIED) for r in batch_records):
                    pool.actors[slot] = None  # restarts exhausted: route nothing more to it
                records += batch_records
            if records:
                sink(records)
        if stopped:
            for ref in inflight:  # nobody will read them: a queued batch never runs, and none is retried
                ray.cancel(ref)
            raise Stopped(f"stopped with {len(inflight)} batches in flight and {len(queue)} queued")
        for slot in range(len(pool.actors)):
            busy = sum(1 for s, _ in inflight.values() if s == slot)
            for _ in range(DEPTH - busy):
                feed(slot)
        if queue and not inflight:
            missing = sum(len(b) for b in queue)
            raise RippleError(f"every worker died; {missing} samples were not run (re-run the grid to resume)")


def _results(ready: list, inflight: dict, batch_size: int) -> list[list[SampleRecord]]:
    """The records of each finished batch; the samples of a batch whose worker died for good (or
    whose call failed in Ray) become error records."""
    import ray

    try:
        return ray.get(ready)  # finished already: this does not wait
    except ray.exceptions.RayError:
        out = []
        for ref in ready:  # one of them failed: find which (each get here returns at once)
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                error = f"{DIED}: {root_cause(exc)}"
                out.append([it.record(error=error, batch_size=batch_size) for it in inflight[ref][1]])
            except ray.exceptions.RayError as exc:
                error = f"{type(exc).__name__}: {root_cause(exc)}"
                out.append([it.record(error=error, batch_size=batch_size) for it in inflight[ref][1]])
        return out


# ---------------------------------------------------------------------------- summaries
def planned_rows(items: list[WorkItem], frame: pl.DataFrame) -> pl.DataFrame:
    """The records of `frame` (the deduplicated store) that belong to `items`."""
    planned = pl.DataFrame([{"cell_id": it.cell.cell_id, "sample_id": it.example.id} for it in items],
                           schema={"cell_id": pl.String, "sample_id": pl.String})
    return frame.join(planned, on=KEY, how="semi")


def summarize(spec: GridSpec, items: list[WorkItem], frame: pl.DataFrame, only: set[str] | None = None
              ) -> list[CellSummary]:
    """Each cell's metrics over its planned samples in `frame` (the deduplicated store), in spec order;
    with `only`, just those cells (the others of `items` still serve as their baselines)."""
    rows = planned_rows(items, frame)
    cells = list(dict.fromkeys(it.cell for it in items)) or list(spec.cells)
    by_id = {c.cell_id: c for c in cells}
    bases = baseline_ids(by_id)
    stats = summarize_cells(rows, {cid: b for cid, b in bases.items() if only is None or cid in only},
                            oracles=oracle_ids(by_id))
    return [CellSummary(c, stats[c.cell_id]) for c in spec.cells if c.cell_id in stats]


# ---------------------------------------------------------------------------- the driver
def run_grid(spec: GridSpec, store_dir: str | os.PathLike, *, experiment: str | None = None,
             tracking_uri: str | None = None, track: bool = True, fresh: bool = False, progress: bool = True,
             workers: int | None = None) -> GridRun:
    """Run (or resume) `spec` into the store; log every cell to MLflow unless `track` is False."""
    started = time.perf_counter()
    experiment = experiment or spec.experiment
    store = ResultStore(store_dir, experiment)
    with store.lock():  # one driver per experiment: a second one is refused here, before any work
        run_id = uuid.uuid4().hex[:12]  # stamped on every record this invocation computes
        items = plan(spec, experiment, run_id)
        if fresh:
            store.clear()
        store.compact()  # merge what a killed run left behind (and set damaged files aside)
        digests = model_digests(c.model for c in spec.cells)
        store.check_weights(digests, "re-run with --fresh to recompute them, or give a new --experiment")
        store.check_aux_weights("re-run with --fresh to recompute them, or give a new --experiment")
        done = store.done_keys()
        todo = [it for it in items if it.key not in done]
        run = GridRun(spec, store, run_id, len(items), len(items) - len(todo), 0)
        tracker = None
        if track:  # open (or create) the MLflow experiment first: a bad tracking URI fails before any decoding
            from .tracking import Tracker

            tracker = Tracker.open(experiment, Path(store_dir), tracking_uri)
        try:
            if todo:
                _execute(run, items, todo, tracker, progress, workers, digests)
            run.summaries = summarize(spec, items, store.read())
            if tracker is not None and run.summaries:
                tracker.log_cells(run.summaries, store.read(), spec.path, spec.data_dir)
        except BaseException as exc:  # a signal or a failure: no run of this experiment stays RUNNING
            if tracker is not None:
                tracker.end_unfinished("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
            raise
    run.seconds = time.perf_counter() - started
    return run


def summary_json(spec: GridSpec, run: GridRun | None = None) -> str:
    """One JSON object: the plan, and with a run its counts and per-cell aggregates."""
    import json

    out: dict[str, Any] = {"spec": spec.path, "experiment": spec.experiment, "cells": len(spec.cells),
                           "batch_size": spec.batch_size}
    if run is None:
        out["plan"] = [{"cell_id": c.cell_id, **c.settings, "limit": c.limit} for c in spec.cells]
        return json.dumps(out)
    out.update(experiment=run.store.experiment, store=str(run.store.root), run_id=run.run_id, planned=run.planned,
               skipped=run.skipped, computed=run.computed, seconds=run.seconds, workers=run.workers,
               results=[{"cell_id": s.cell_id, **s.cell.settings, **s.metrics()} for s in run.summaries])
    return json.dumps(out)


def _execute(run: GridRun, items: list[WorkItem], todo: list[WorkItem], tracker, progress: bool,
             workers: int | None, digests: dict[str, str | None]) -> None:
    """Stream `todo` through one worker pool per (model, dtype), storing each batch of records as it
    arrives and logging each cell to MLflow once its last sample is stored."""
    from ...progress import progress as progress_bar

    spec, store = run.spec, run.store
    per_cell = Counter(it.cell.cell_id for it in todo)  # samples still missing per cell
    total = len(spec.cells)
    bar = None
    written = 0

    def sink(records: list[SampleRecord]) -> None:
        nonlocal written
        store.append(records)
        run.computed += len(records)
        written += len(records)
        if written >= COMPACT_EVERY:
            store.compact()
            written = 0
        per_cell.subtract(r.cell_id for r in records)
        finished = {r.cell_id for r in records if per_cell[r.cell_id] == 0}
        if tracker is not None and finished:
            frame = store.read()
            complete = [it for it in items if per_cell[it.cell.cell_id] <= 0]  # speedup needs Default's cell
            tracker.log_cells(summarize(spec, complete, frame, only=finished), frame, spec.path, spec.data_dir)
        bar.set_description(_progress_text(run, per_cell, total), refresh=False)
        bar.update(len(records))

    t0 = time.perf_counter()
    groups: dict[tuple[str, str], list[WorkItem]] = {}
    for it in todo:
        groups.setdefault((it.cell.model, it.cell.dtype), []).append(it)
    with ray_driver(store):
        run.startup_seconds += time.perf_counter() - t0
        try:
            for (model, dtype), group in groups.items():
                t0 = time.perf_counter()
                count, cpus, gpus = pool_shape(spec.workers, workers, len(batches(group, spec.batch_size)))
                pool = WorkerPool(model, dtype, spec.data_dir, spec.workers, count, cpus, gpus, digests[model])
                run.pools.append(pool.infos)
                t1 = time.perf_counter()
                run.startup_seconds += t1 - t0
                if bar is None:  # after the first workers are up, so a start-up error stays one line
                    bar = progress_bar(total=len(todo), disable=not progress, unit="sample", dynamic_ncols=True,
                                       desc=_progress_text(run, per_cell, total))
                try:
                    stream_items(pool, group, sink, spec.batch_size)
                finally:
                    run.stream_seconds += time.perf_counter() - t1
                    pool.close()
        finally:
            if bar is not None:
                bar.close()


def _compact_quietly(store: ResultStore) -> None:
    """Merge part files after a failure, unless that fails too (a full disk: the part files stay as they are)."""
    try:
        store.compact()
    except (OSError, RippleError) as exc:
        logging.getLogger(__name__).warning(f"part files of {store.dir} left uncompacted ({exc})")


def _progress_text(run: GridRun, per_cell: Counter, total: int) -> str:
    missing = sum(1 for n in per_cell.values() if n > 0)
    return f"{run.store.experiment}: cells {total - missing}/{total}"


INTERVALS_NOTE = ("± is half the width of a 95 % interval: Wilson for accuracy, paired bootstrap over the shared "
                  "samples for speedup (vs default); * marks an accuracy that differs from default's at p < 0.05 "
                  "(exact McNemar).")


THROUGHPUT_NOTE = ("TPS and speedup are batch-1 figures (samples decoded alone; - when none was); throughput is "
                   "generated tokens per second of wall time across each worker's batches, at the largest batch size.")


ORACLE_NOTE = ("NFE / oracle is a decoder's mean NFE over the oracle's on the same samples: the oracle writes "
               "default's answers in the fewest forwards this model allows (docs/decoders.md, \"The oracle\").")


STRICT_NOTE = ("strict % is ParallelBench's score_strict: the same rule on a strictly formatted answer "
               "(- for a task without it).")


def workers_text(run: GridRun) -> str:
    """How many workers decoded and on what. Pools run one (model, dtype) at a time, so with several the
    count that says how wide the grid ran is a pool's, not the sum over pools."""
    hardware = ', '.join(sorted({w['hardware'] for w in run.workers}))
    if len(run.pools) > 1:
        return (f"{max(map(len, run.pools))} worker(s) at a time, one pool per model in turn ({len(run.pools)} pools) "
                f"on {hardware}")
    return f"{len(run.workers)} worker(s) on {hardware}"


def format_table(run: GridRun) -> str:
    """The comparison table: one row per cell; settings shared by every cell go to the header line; a strict
    column where a task has ParallelBench's strict figure, as eval, the leaderboard and MLflow show it."""
    sums = run.summaries
    if not sums:
        return f"grid {run.store.experiment}: no samples stored"
    settings = ["model", "gen_length", "block_length", "cache", "seed", "dtype", "chat"]

    def value(cell, name):  # the chat column shows the form (False, multiturn or singleturn)
        return cell.prompt_chat if name == "chat" else getattr(cell, name)

    varying = [c for c in settings if len({value(s.cell, c) for s in sums}) > 1]
    first = sums[0].cell
    limits = "/".join(map(str, sorted({s.n + s.errors for s in sums})))
    head = (f"grid {run.store.experiment}: {', '.join(f'{c} {value(first, c)}' for c in settings if c not in varying)}"
            f"; {limits} samples per cell; {run.computed} computed, {run.skipped} already stored")
    if run.workers:
        head += f"; {workers_text(run)}"
    sizes = sorted({s.batch_size for s in sums})
    batched = sizes[-1] > 1
    if batched:  # throughput mode: TPS and speedup stay batch-1 figures (records decoded alone)
        head += f"; batch size {'/'.join(map(str, sizes))}"
    errors = any(s.errors for s in sums)
    edited = any(s.mean_edits is not None for s in sums)  # token editing: edits per sample
    strict = any(s.strict is not None for s in sums)  # ParallelBench's strict figure, where a task has one
    # NFE / oracle beside mean NFE wherever the grid holds an oracle cell (the oracle's own row reads 1.00x)
    oracle = any(s.nfe_over_oracle is not None for s in sums)
    verified = any(s.mean_verifier_nfe is not None for s in sums)  # a decoder with a second model: its forwards
    keys = [["task", *varying, "decoder"]] + [[s.cell.task, *(str(value(s.cell, c)) for c in varying),
                                                s.cell.label()] for s in sums]
    minimum = [7] + [0] * len(varying) + [11]  # the widths of the original demo table
    widths = [max(m, *(len(row[i]) for row in keys)) for i, m in enumerate(minimum)]
    cols = [[s.accuracy_text() + (" *" if s.significant else "  "), f"{s.mean_nfe:.2f}"]
            + ([_tpf(s.mean_verifier_nfe)] if verified else []) + ([ratio_text(s.nfe_over_oracle)] if oracle else [])
            + [_tpf(s.tpf), _number(s.tps), s.speedup_text()] + ([_number(s.throughput)] if batched else [])
            + ([strict_text(s.strict)] if strict else []) + ([_tpf(s.mean_edits or 0.0)] if edited else [])
            + ([str(s.errors)] if errors else [])
            for s in sums]
    metrics = (["accuracy %", "mean NFE"] + (["verifier NFE"] if verified else []) + (["NFE / oracle"] if oracle else [])
               + ["TPF", "TPS", "speedup"] + (["throughput"] if batched else [])
               + (["strict %"] if strict else []) + (["edits"] if edited else []) + (["errors"] if errors else []))
    mwidths = [max(len(m), *(len(c[i]) for c in cols)) for i, m in enumerate(metrics)]

    def line(keys_: list[str], values: list[str]) -> str:
        return "| " + " | ".join([f"{c:<{w}}" for c, w in zip(keys_, widths)] +
                                 [f"{v:>{w}}" for v, w in zip(values, mwidths)]) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths + mwidths) + "|"
    lines = [head, line(keys[0], metrics), rule]
    for row, values in zip(keys[1:], cols):
        lines.append(line(row, values))
    lines.append(INTERVALS_NOTE)
    if verified:
        lines.append(VERIFIER_RULE)
    if oracle:
        lines.append(ORACLE_NOTE)
    if strict:
        lines.append(STRICT_NOTE)
    if batched:
        lines.append(THROUGHPUT_NOTE)
    return "\n".join(lines)


def _number(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _tpf(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"
