"""`ripple sweep`: Ray Tune over a decoder's hyperparameters, on the grid's long-lived workers.

Why trials do not load models: a model load costs far more than a trial's few dozen
samples, and on a GPU cluster a trial that owned a GPU would idle it between samples.
So the driver starts one worker pool (the same actors `ripple grid` uses), hands the
actor handles to every trial through `tune.with_parameters`, and each trial, which asks
Tune for no CPU of its own, only plans its cells, streams the missing samples through
the shared actors, appends the records to the result store (its own part files, never
compacting: other trials write concurrently), and reports its metrics to Tune: the
metrics module's numbers over all the trial's samples (every task pooled), compared with
the default baseline's records on the same samples.

Each trial evaluates one cell per task; cell ids follow the grid's scheme, so a re-run
skips stored samples and `ripple report` lists the trials in its sensitivity table.
Only the driver writes MLflow (one parent run per invocation, one child per trial), so
one process owns the SQLite store. A signal reaches the driver only: it stops as a grid does
(the grid's `ray_driver`, exit 130 / 143), after stopping the trials through a `TrialGate`. Outputs under STORE/EXPERIMENT/sweep/: the trial
table (sweep_results.csv) and the Pareto plot (pareto.png), also logged to the parent.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import RippleError
from ..platform.experiments.grid import (INTERVALS_NOTE, Stopped, WorkerPool, model_digests, planned_rows, pool_shape,
                                         ray_driver, root_cause, stream_items)
from ..platform.experiments.metrics import CellMetrics, cell_metrics, self_baseline
from ..platform.experiments.spec import Cell
from ..platform.experiments.store import ResultStore, dumps
from ..platform.experiments.workers import WorkItem
from .spec import SweepSpec

PARENT_TAG = "ripple_sweep"  # on the parent run: the sweep's invocation id
TRIAL_TAG = "ripple_trial_id"
TRIAL_MEMORY = 64 * 2**20  # bytes a trial asks Ray for: its only resource request (it never takes a CPU)


def score(agg: CellMetrics, weights: tuple[tuple[str, float], ...]) -> float:
    """The spec's scalarisation: sum of weight x metric (metric `score`)."""
    values = {"accuracy": agg.accuracy, "mean_nfe": agg.mean_nfe, "tps": agg.tps or 0.0, "speedup": agg.speedup or 0.0,
              "throughput": agg.throughput or 0.0}
    return sum(w * values[k] for k, w in weights)


@dataclass(frozen=True)
class TrialResult:
    """One Tune trial as the sweep reports it (and logs to its MLflow child run)."""

    trial_id: str
    params: tuple[tuple[str, Any], ...]  # the searched hyperparameters, public names
    cell_ids: tuple[str, ...]
    agg: CellMetrics | None  # over all the trial's samples, against the baseline's; None when the trial failed
    computed: int = 0  # samples this trial decoded (the rest were in the store)
    error: str | None = None

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params)


@dataclass
class SweepRun:
    """What one `ripple sweep` invocation did."""

    spec: SweepSpec
    store: ResultStore
    sweep_id: str
    trials: list[TrialResult] = field(default_factory=list)
    baseline: CellMetrics | None = None
    front_tps: list[str] = field(default_factory=list)  # trial ids on the accuracy-vs-TPS front
    front_nfe: list[str] = field(default_factory=list)  # trial ids on the accuracy-vs-mean-NFE front
    best: str | None = None  # trial id best by the spec's metric
    out_dir: Path | None = None
    parent_run_id: str | None = None
    child_runs: dict[str, str] = field(default_factory=dict)  # trial id -> MLflow run id
    workers: list[dict] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Context:
    """What every trial needs, shipped once through the object store by `tune.with_parameters`."""

    spec: SweepSpec
    store_root: str
    sweep_id: str
    examples: dict  # task -> its examples (the per-task limit applied)
    done: frozenset  # keys already stored without error when the sweep started
    baseline: pl.DataFrame | None  # the default cells' records: speedups and paired tests compare with them


class _Actors:
    """The shape `stream_items` expects of a pool: a list of actor handles it may mark dead (None)."""

    def __init__(self, actors: list):
        self.actors = list(actors)


class _NoPool:
    """Stands in for the worker pool when every sample a grid sweep needs is stored: no model loads."""

    actors: list = []
    infos: list = []

    def close(self) -> None:
        pass


def _all_stored(spec: SweepSpec, examples: dict, done: frozenset) -> bool:
    """True when a grid sweep's every trial (and the baseline) is in the store already. Random and
    Optuna searches cannot know their trials before they run, so they always start the workers."""
    if spec.search != "grid":
        return False
    import itertools

    dims = spec.space.dims
    cells = list(spec.baseline_cells()) if spec.baseline else []
    for values in itertools.product(*(d.grid_values() for d in dims)):
        params = spec.space.params_for(dict(zip((d.name for d in dims), values)))
        cells += spec.cells_for(spec.decoder, params.to_dict())
    return all((c.cell_id, ex.id) in done for c in cells for ex in examples[c.task])


def _items(ctx: _Context, cells: tuple[Cell, ...]) -> list[WorkItem]:
    return [WorkItem(ctx.spec.experiment, ctx.sweep_id, c, ex) for c in cells for ex in ctx.examples[c.task]]


def _evaluate(ctx: _Context, actors: list, cells: tuple[Cell, ...], stop: Any = None) -> tuple[pl.DataFrame, int]:
    """Stream the cells' missing samples through the shared workers into the store; their records."""
    items = _items(ctx, cells)
    todo = [it for it in items if it.key not in ctx.done]
    store = ResultStore(ctx.store_root, ctx.spec.experiment)
    if todo:
        if not actors:
            raise RippleError(f"{len(todo)} samples of cells {', '.join(c.cell_id for c in cells)} are not stored "
                              f"and no workers were started")
        stream_items(_Actors(actors), todo, store.append, ctx.spec.batch_size, stop)  # a part file per finished batch
    return planned_rows(items, store.read()), len(todo)


def _trial(config: dict[str, Any], ctx: _Context, actors: list, gate: Any) -> None:
    """The function trainable: one evaluation of the config, one `tune.report`. It streams between
    `gate.enter` and `gate.leave`, and stops (its returned samples stored) once the gate closes."""
    import ray
    from ray import tune

    params = ctx.spec.space.params_for(config)
    cells = ctx.spec.cells_for(ctx.spec.decoder, params.to_dict())
    if not ray.get(gate.enter.remote()):
        return  # the sweep is stopping: start nothing
    stop = gate.closed.remote()
    try:
        rows, computed = _evaluate(ctx, actors, cells, stop)
    except Stopped:
        return
    finally:
        ray.cancel(stop)  # a waiting call holds one of the gate's slots (an async actor has 1,000)
        ray.get(gate.leave.remote())
    agg = cell_metrics(rows, ctx.baseline)
    metrics: dict[str, Any] = {**agg.metrics(), "computed": computed, "cell_ids": ",".join(c.cell_id for c in cells),
                               "params": dumps(ctx.spec.space.searched(params))}
    if ctx.spec.weights:
        metrics["score"] = score(agg, ctx.spec.weights)
    for c in cells:
        m = cell_metrics(rows.filter(pl.col("cell_id") == c.cell_id))
        metrics.update({f"{c.task}.{k}": getattr(m, k) for k in ("accuracy", "tps", "mean_nfe", "throughput")
                        if getattr(m, k) is not None})
    tune.report(metrics)


class TrialGate:
    """How the driver stops its trials. A signal reaches the driver only: trials run in Ray actors and
    write the store themselves. So on SIGINT or SIGTERM the driver closes the gate and waits (at most
    STOP_WAIT seconds) until every trial inside has stored the records its workers returned and left;
    only then are the workers killed and the store compacted. An async Ray actor (`_open_gate`):
    `closed` is a call that returns when the gate closes, which trials wait on beside their batches."""

    def __init__(self):
        import asyncio

        self._closed = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self._inside = 0

    async def enter(self) -> bool:
        if self._closed.is_set():
            return False
        self._inside += 1
        self._empty.clear()
        return True

    async def leave(self) -> None:
        self._inside -= 1
        if self._inside == 0:
            self._empty.set()

    async def closed(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()
        await self._empty.wait()


STOP_WAIT = 20.0  # seconds the driver waits for trials to store what they have, after a signal


def _open_gate():
    import ray

    return ray.remote(num_cpus=0)(TrialGate).remote()


def _stop_trials(handle) -> None:
    """Close the gate and wait for the trials inside to leave; a trial that does not in STOP_WAIT is
    abandoned (its samples in flight are recomputed by the next run)."""
    import ray

    try:
        ray.get(handle.close.remote(), timeout=STOP_WAIT)
    except ray.exceptions.GetTimeoutError:
        logging.getLogger(__name__).warning(f"a trial still decoding after {STOP_WAIT:.0f} s was abandoned")


# ---------------------------------------------------------------------------- the driver
def run_sweep(spec: SweepSpec, store_dir: str | os.PathLike, *, tracking_uri: str | None = None, track: bool = True,
              progress: bool = True, workers: int | None = None) -> SweepRun:
    """Run `spec` (trials resume from stored samples), log to MLflow, write the table and Pareto plot.
    Stopped by a signal, it stops as a grid does: the samples returned so far stored once, its MLflow
    runs marked KILLED, KeyboardInterrupt (`Terminated` for SIGTERM) raised."""
    started = time.perf_counter()
    store = ResultStore(store_dir, spec.experiment)
    with store.lock():  # one driver per experiment: a second one is refused here, before any work
        run = SweepRun(spec, store, uuid.uuid4().hex[:12])
        tracker = None
        if track:  # a bad tracking URI fails before Ray starts
            from ..platform.experiments.tracking import Tracker

            tracker = Tracker.open(spec.experiment, store.root, tracking_uri)
        planned = _plan(spec, store)  # a refusal (data, other weights) comes before any MLflow run is opened
        try:
            if tracker is not None:
                _open_parent(run, tracker)  # RUNNING while the sweep runs
            _sweep(run, *planned, workers, progress)
            _name_fronts(run)
            run.out_dir = write_outputs(run)
            if tracker is not None:
                _log_mlflow(run, tracker)
        except BaseException as exc:  # a signal or a failure: no run of this experiment stays RUNNING
            if tracker is not None:
                tracker.end_unfinished("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED", PARENT_TAG)
            raise
    run.seconds = time.perf_counter() - started
    return run


def _plan(spec: SweepSpec, store: ResultStore) -> tuple[dict, dict, frozenset]:
    """Each task's examples, the model's weights digest (checked against the stored samples), and
    the keys stored without error."""
    from ..tasks import get_task

    examples = {t: get_task(t, data_dir=spec.data_dir).examples(spec.split, limit) for t, limit, _ in spec.tasks}
    store.compact()  # merge what an interrupted run left, before trials add their part files
    digests = model_digests([spec.model])
    store.check_weights(digests, "give a new --experiment (a sweep resumes from what its experiment stores)")
    store.check_aux_weights("give a new --experiment (a sweep resumes from what its experiment stores)")
    return examples, digests, frozenset(store.done_keys())


def _sweep(run: SweepRun, examples: dict, digests: dict, done: frozenset, workers: int | None,
           progress: bool) -> None:
    """The baseline, then the trials, on one worker pool; every trial failing is an error."""
    spec, store = run.spec, run.store
    with ray_driver(store):  # compacts once every trial has stopped writing (only the driver compacts)
        per_trial = sum(len(v) for v in examples.values())
        count, cpus, gpus = pool_shape(spec.workers, workers, per_trial * max(1, spec.trial_count()))
        pool = _NoPool() if _all_stored(spec, examples, done) else \
            WorkerPool(spec.model, spec.dtype, spec.data_dir, spec.workers, count, cpus, gpus, digests[spec.model])
        run.workers = pool.infos
        try:
            ctx = _Context(spec, str(store.root), run.sweep_id, examples, done, None)
            if spec.baseline:
                base_rows, _ = _evaluate(ctx, pool.actors, spec.baseline_cells())
                run.baseline = self_baseline(cell_metrics(base_rows))
                ctx = _Context(spec, str(store.root), run.sweep_id, examples, ctx.done, base_rows)
            run.trials = _tune(spec, ctx, pool.actors, store, run.sweep_id, progress)
        finally:
            pool.close()
    if not any(t.agg for t in run.trials):
        first = next((t.error for t in run.trials if t.error), "no trial reported")
        raise RippleError(f"every trial of sweep {spec.experiment} failed; first error: {first}")


def _tune(spec: SweepSpec, ctx: _Context, actors: list, store: ResultStore, sweep_id: str,
          progress: bool) -> list[TrialResult]:
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0 the legacy reporter prints nothing at all
    # Tune's own SIGINT handler would end the run as if it were complete (and print how to Tuner.restore);
    # without it a signal raises here, as it does in a grid, and the trials are stopped through the gate
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    from ray import tune

    handle = _open_gate()
    # trials only wait on the workers, so they take no CPU; Tune rejects an empty request, hence a token of memory
    trainable = tune.with_resources(tune.with_parameters(_trial, ctx=ctx, actors=actors, gate=handle),
                                    {"cpu": 0, "memory": TRIAL_MEMORY})
    metric = spec.metric  # the spec parser made sure a `speedup` metric comes with its baseline
    search_alg = None
    if spec.search == "optuna":
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        search_alg = OptunaSearch(sampler=optuna.samplers.TPESampler(seed=spec.seed), metric=metric, mode=spec.mode)
    elif spec.search == "random":
        from ray.tune.search import BasicVariantGenerator

        search_alg = BasicVariantGenerator(random_state=spec.seed)
    concurrent = spec.concurrent_trials or max(1, len(actors))
    bar = _trial_bar(spec.trial_count(), spec.experiment, progress)
    tuner = tune.Tuner(
        trainable,
        param_space=spec.space.param_space(spec.search),
        tune_config=tune.TuneConfig(num_samples=spec.num_samples, search_alg=search_alg,
                                    max_concurrent_trials=concurrent, reuse_actors=True,  # one trial process per slot
                                    **({} if spec.search == "optuna" else {"metric": metric, "mode": spec.mode})),
        run_config=tune.RunConfig(name=f"tune-{sweep_id}", storage_path=str(store.root / spec.experiment / "sweep"),
                                  verbose=0, callbacks=[bar], log_to_file=False),
    )
    try:
        grid = tuner.fit()
    except KeyboardInterrupt:  # SIGINT, or SIGTERM (`Terminated`)
        _stop_trials(handle)
        raise
    finally:
        bar.close()
    out = []
    for result in grid:
        m = result.metrics or {}
        trial_id = m.get("trial_id") or Path(result.path).name
        if result.error is not None or "accuracy" not in m:
            params = tuple((d.name, result.config.get(d.name)) for d in spec.space.dims)
            error = root_cause(result.error) if result.error is not None else "no result reported"
            out.append(TrialResult(trial_id, params, (), None, 0, error))
            continue
        params = tuple(json.loads(m["params"]).items())
        agg = CellMetrics.from_metrics(m)
        out.append(TrialResult(trial_id, params, tuple(m["cell_ids"].split(",")), agg, int(m["computed"])))
    return sorted(out, key=lambda t: t.trial_id)


def _trial_bar(total: int, name: str, enabled: bool):
    """A Tune callback drawing a tqdm bar over finished trials (Tune's own reporter stays silent:
    verbose=0). Built on first use, so importing this module does not import Ray Tune."""
    from ray.tune import Callback
    from ..progress import progress as progress_bar

    class TrialBar(Callback):
        def __init__(self):
            self.bar = progress_bar(total=total, disable=not enabled, unit="trial", desc=f"{name}: trials",
                            dynamic_ncols=True)

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.bar.update(1)

        def on_trial_error(self, iteration, trials, trial, **info):
            self.bar.update(1)

        def close(self) -> None:
            self.bar.close()

        def __getstate__(self) -> dict:  # Tune pickles its callbacks with the experiment state, which no
            return {}  # stream but the real sys.stderr survives (a notebook's, pytest's capture)

    return TrialBar()


# ---------------------------------------------------------------------------- outputs
def _name_fronts(run: SweepRun) -> None:
    from ..dashboards.pareto import ACCURACY_NFE, ACCURACY_TPS, pareto_front

    ok = [t for t in run.trials if t.agg is not None]
    # a batched sweep has no batch-1 TPS; its speed axis is throughput
    speed = (lambda a: a.tps) if run.spec.batch_size == 1 else (lambda a: a.throughput)  # noqa: E731
    run.front_tps = [ok[i].trial_id for i in pareto_front([(t.agg.accuracy, speed(t.agg)) for t in ok], ACCURACY_TPS)]
    run.front_nfe = [ok[i].trial_id for i in pareto_front([(t.agg.accuracy, t.agg.mean_nfe) for t in ok],
                                                          ACCURACY_NFE)]
    sign = 1.0 if run.spec.mode == "max" else -1.0

    def value(t: TrialResult) -> float:
        v = score(t.agg, run.spec.weights) if run.spec.metric == "score" else t.agg.metrics().get(run.spec.metric)
        return -math.inf if v is None or math.isnan(v) else sign * v

    run.best = max(ok, key=value).trial_id if ok else None


TABLE_METRICS = ("accuracy", "accuracy_lo", "accuracy_hi", "mean_nfe", "tps", "speedup", "speedup_lo", "speedup_hi",
                 "nfe_speedup", "p_value", "n", "errors", "batch_size", "throughput")


def trial_frame(run: SweepRun):
    """The trial table (one row per trial, plus the baseline): what the CSV, the plot and the tests read."""
    import polars as pl

    names = [d.name for d in run.spec.space.dims]
    rows = []
    for t in run.trials:
        a = t.agg
        p = dict(t.params)
        rows.append({"trial_id": t.trial_id, "label": t.label, **{n: p.get(n) for n in names},
                     **{k: getattr(a, k) if a else None for k in TABLE_METRICS}, "computed": t.computed,
                     "front_tps": t.trial_id in run.front_tps, "front_nfe": t.trial_id in run.front_nfe,
                     "cell_ids": ",".join(t.cell_ids), "error": t.error})
    return pl.DataFrame(rows, infer_schema_length=None)


def pareto_figure(run: SweepRun):
    """pareto.png's figure: the report's Pareto plot of the trials only (each accuracy with its Wilson
    interval as a bar), so its fronts are exactly the named ones (the default baseline is a row of the
    printed table instead)."""
    from ..dashboards.report import pareto_figure as figure

    frame = trial_frame(run)
    names = [d.name for d in run.spec.space.dims]
    short = [f"#{t.trial_id.rsplit('_', 1)[-1].lstrip('0') or '0'} ({', '.join(str(dict(t.params).get(n)) for n in names)})"
             for t in run.trials]  # close points stay legible: `#3 (0.9, 0.3)`
    points = frame.with_columns(pl.Series("label", short)).filter(pl.col("accuracy").is_not_null())
    base = ""
    if run.baseline is not None:
        b = run.baseline
        speed = f"{b.tps:.1f} TPS" if b.tps is not None else f"{b.throughput or 0.0:.1f} tokens/s (batch {b.batch_size})"
        base = f"; default: {b.accuracy:.1f}% at {speed}, NFE {b.mean_nfe:.1f}"
    tasks = ", ".join(t for t, _, _ in run.spec.tasks)
    speed = pl.col("tps") if run.spec.batch_size == 1 else pl.col("throughput").alias("tps")
    axis = "" if run.spec.batch_size == 1 else f"; x axis: throughput at batch {run.spec.batch_size}"
    return figure(points.select("label", "accuracy", "accuracy_lo", "accuracy_hi", speed, "mean_nfe"),
                  f"{run.spec.experiment}: {run.spec.decoder} trials #n ({', '.join(names)}) on {run.spec.model} "
                  f"({tasks}){base}{axis}")


def write_outputs(run: SweepRun) -> Path:
    """sweep_results.csv and pareto.png under STORE/EXPERIMENT/sweep/."""
    from ..dashboards.plots import save_png

    out = run.store.root / run.spec.experiment / "sweep"
    out.mkdir(parents=True, exist_ok=True)
    trial_frame(run).write_csv(out / "sweep_results.csv")
    save_png(pareto_figure(run), out / "pareto.png")
    return out


def _open_parent(run: SweepRun, tracker) -> None:
    """The invocation's parent run, RUNNING from the start (params: the spec), so a stopped sweep
    leaves a KILLED run in the UI rather than nothing."""
    from mlflow.entities import Param

    spec = run.spec
    run.parent_run_id = tracker.client.create_run(
        tracker.experiment_id, run_name=f"sweep {spec.decoder} {run.sweep_id}",
        tags={PARENT_TAG: run.sweep_id, "ripple_spec": spec.path}).info.run_id
    params = {"model": spec.model, "tasks": dumps({t: n for t, n, _ in spec.tasks}), "decoder": spec.decoder,
              "search": spec.search, "num_samples": spec.num_samples, "metric": spec.metric, "mode": spec.mode,
              "space": "; ".join(d.describe() for d in spec.space.dims), "fixed": dumps(dict(spec.space.fixed)),
              "gen_length": spec.gen_length, "block_length": spec.block_length, "cache": spec.cache,
              "seed": spec.seed, "dtype": spec.dtype, "chat": spec.chat, "baseline": spec.baseline, "spec": spec.path}
    if spec.weights:
        params["weights"] = dumps(dict(spec.weights))
    tracker.client.log_batch(run.parent_run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])


def _log_mlflow(run: SweepRun, tracker) -> None:
    """The parent's metrics, fronts and artifacts, and one child run per trial (params: its hyperparameters)."""
    from mlflow.entities import Metric, Param, RunTag

    client, spec, parent = tracker.client, run.spec, run.parent_run_id
    now = int(time.time() * 1000)
    metrics = [Metric("trials", float(len(run.trials)), now, 0)]
    if run.baseline is not None:
        metrics += [Metric(f"default.{k}", float(v), now, 0) for k, v in run.baseline.metrics().items()]
    client.log_batch(parent, metrics=metrics, tags=[RunTag("pareto_front_tps", ",".join(run.front_tps)),
                                                    RunTag("pareto_front_nfe", ",".join(run.front_nfe)),
                                                    RunTag("best_trial", run.best or "")])
    for t in run.trials:
        tags = {"mlflow.parentRunId": parent, TRIAL_TAG: t.trial_id, PARENT_TAG: run.sweep_id,
                "ripple_cell_ids": ",".join(t.cell_ids), "pareto_front_tps": str(t.trial_id in run.front_tps),
                "pareto_front_nfe": str(t.trial_id in run.front_nfe)}
        if t.error:
            tags["error"] = t.error[:5000]
        child = client.create_run(tracker.experiment_id, run_name=f"{t.trial_id} {t.label}", tags=tags).info.run_id
        batch_metrics = [Metric(k, float(v), now, 0) for k, v in (t.agg.metrics().items() if t.agg else [])]
        if t.agg and spec.weights:
            batch_metrics.append(Metric("score", score(t.agg, spec.weights), now, 0))
        client.log_batch(child, params=[Param(f"decoder.{k}", str(v)) for k, v in t.params], metrics=batch_metrics)
        client.set_terminated(child, "FINISHED" if t.agg else "FAILED")
        run.child_runs[t.trial_id] = child
    client.log_artifact(parent, str(run.out_dir / "sweep_results.csv"))
    client.log_artifact(parent, str(run.out_dir / "pareto.png"))
    client.set_terminated(parent, "FINISHED")


def format_table(run: SweepRun) -> str:
    """The trial table, then the Pareto fronts by name."""
    spec = run.spec
    names = [d.name for d in spec.space.dims]
    head = (f"sweep {spec.experiment}: {spec.decoder} on {spec.model}, {spec.search} search, {len(run.trials)} trials; "
            f"accuracy over every sample of {', '.join(t for t, _, _ in spec.tasks)}")
    batched = spec.batch_size > 1
    cols = ["trial", *names, "accuracy %", "mean NFE", "TPF", "TPS", "speedup", *(["throughput"] if batched else []),
            "front"]
    num = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    tpf = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    rows = []
    if run.baseline is not None:
        b = run.baseline
        rows.append(["default", *["-"] * len(names), b.accuracy_text(), f"{b.mean_nfe:.2f}", tpf(b.tpf), num(b.tps),
                     b.speedup_text(), *([num(b.throughput)] if batched else []), ""])
    for t in run.trials:
        p = dict(t.params)
        if t.agg is None:
            rows.append([t.trial_id, *(str(p.get(n)) for n in names), "failed", "", "", "", "",
                         *([""] if batched else []), (t.error or "")[:60]])
            continue
        a = t.agg
        front = " + ".join(n for n, ids in (("acc-TPS", run.front_tps), ("acc-NFE", run.front_nfe)) if t.trial_id in ids)
        rows.append([t.trial_id, *(str(p.get(n)) for n in names), a.accuracy_text() + (" *" if a.significant else ""),
                     f"{a.mean_nfe:.2f}", tpf(a.tpf), num(a.tps), a.speedup_text(),
                     *([num(a.throughput)] if batched else []), front + (" *best" if t.trial_id == run.best else "")])
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    line = lambda r: "| " + " | ".join(f"{v:<{w}}" for v, w in zip(r, widths)) + " |"  # noqa: E731
    lines = [head, line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    labels = {t.trial_id: t.label for t in run.trials}
    for title, ids in (("accuracy vs TPS", run.front_tps), ("accuracy vs mean NFE", run.front_nfe)):
        lines.append(f"Pareto front ({title}): " + "; ".join(f"{i} ({labels[i]})" for i in ids))
    lines.append(INTERVALS_NOTE)
    lines.append(f"best by {spec.metric} ({spec.mode}): {run.best}; table and plot (bars: each accuracy's 95 % "
                 f"Wilson interval) in {run.out_dir}"
                 + (f"; MLflow parent run {run.parent_run_id}" if run.parent_run_id else ""))
    return "\n".join(lines)


def summary_json(run: SweepRun) -> str:
    """One JSON object: the sweep, its baseline, trials and fronts (`ripple sweep --json`)."""
    return json.dumps({
        "experiment": run.spec.experiment, "spec": run.spec.path, "sweep_id": run.sweep_id,
        "store": str(run.store.root), "out_dir": str(run.out_dir), "parent_run_id": run.parent_run_id,
        "baseline": run.baseline.metrics() if run.baseline else None, "best": run.best,
        "front_tps": run.front_tps, "front_nfe": run.front_nfe, "seconds": run.seconds, "workers": run.workers,
        "trials": [{"trial_id": t.trial_id, "params": dict(t.params), "cell_ids": list(t.cell_ids),
                    "metrics": t.agg.metrics() if t.agg else None, "computed": t.computed, "error": t.error,
                    "mlflow_run_id": run.child_runs.get(t.trial_id)} for t in run.trials]})
