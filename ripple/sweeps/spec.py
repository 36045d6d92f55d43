"""Sweep specs: YAML -> a validated `SweepSpec`.

A sweep fixes one model, a task subset and one decoder, and searches that decoder's
hyperparameters (`space`, derived from its dataclass; see `spaces.py`). Every trial
evaluates one cell per task, with the same cell ids a grid would give the same settings,
so `ripple report` treats a sweep's cells like any grid's. Validation happens before
Ray starts and every problem is one line naming the spec and the key.

Example (`specs/tiny-demo.yaml` is another):

    model: ripple-tiny
    tasks: {arith: {limit: 20}, pyfunc: {limit: 20}}
    decoder: rps
    search: grid               # grid | random | optuna
    space: {lambda: [0.0, 0.2, 0.5]}
    metric: accuracy           # accuracy | tps | mean_nfe | speedup | score (weights: {accuracy: 1, tps: 0.05})
    baseline: true             # also evaluate `default` once: speedups
    gen_length: 48
    block_length: 16
    batch_size: 1              # samples of a cell per engine call; above 1 rank by `throughput`, not TPS
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


from ..errors import RippleError
from ..platform.experiments.metrics import BASELINE_DECODER
from ..platform.experiments.spec import Cell, GridSpec, WorkerSpec, SpecParser, read_yaml_spec, shipped_names
from ..platform.experiments.store import DecodeSettings, check_name
from .spaces import DEFAULT_POINTS, SEARCHES, SearchSpace, derive_space

SPECS_DIR = Path(__file__).resolve().parent / "specs"
TOP_KEYS = ("experiment", "description", "model", "tasks", "limit", "decoder", "space", "search", "num_samples",
            "metric", "mode", "weights", "grid_points", "baseline", "gen_length", "block_length", "cache", "seed",
            "dtype", "chat", "split", "stop_at_eos", "eos_early_stop", "block_align", "sub_block_length", "data_dir",
            "workers", "concurrent_trials", "batch_size")
METRICS = ("accuracy", "mean_nfe", "tps", "canvas_tps", "speedup", "throughput", "score")
DEFAULT_MODE = {"accuracy": "max", "mean_nfe": "min", "tps": "max", "canvas_tps": "max", "speedup": "max",
                "throughput": "max", "score": "max"}
WEIGHT_KEYS = ("accuracy", "mean_nfe", "tps", "speedup", "throughput")
BATCH1_METRICS = ("tps", "canvas_tps", "speedup")  # latency figures: measured on samples decoded alone only


@dataclass(frozen=True, kw_only=True)
class SweepSpec(DecodeSettings):
    """A validated sweep: what every trial evaluates, and how Tune searches."""

    path: str
    experiment: str
    model: str
    tasks: tuple[tuple[str, int | None, str], ...]  # (task, samples per cell, the task's options as JSON)
    decoder: str
    space: SearchSpace
    search: str  # grid | random | optuna
    num_samples: int  # grid: repeats of the whole grid; random/optuna: trials
    metric: str
    mode: str
    weights: tuple[tuple[str, float], ...]  # the scalarisation behind metric `score`
    baseline: bool
    data_dir: str | None
    workers: WorkerSpec
    concurrent_trials: int | None = None  # None: one per worker
    description: str = ""
    batch_size: int = 1  # samples of a cell per engine call (timing only: not part of the cell ids)

    def cells_for(self, decoder: str, params: dict[str, Any]) -> tuple[Cell, ...]:
        """One cell per task for `decoder` with every hyperparameter in `params` (public names). Task
        options are per task (`tasks`), so they replace the spec's own `task_options`, which stays "{}"."""
        ordered = tuple(sorted(params.items()))
        return tuple(Cell(model=self.model, task=task, decoder=decoder, params=ordered, limit=limit,
                          **{**self.decode_settings(), "task_options": options}) for task, limit, options in self.tasks)

    def baseline_cells(self) -> tuple[Cell, ...]:
        from ..decoders import get

        return self.cells_for(BASELINE_DECODER, get(BASELINE_DECODER).Params().to_dict())

    def grid_spec(self, cells: tuple[Cell, ...]) -> GridSpec:
        """`cells` as a grid spec, so the grid's summaries (and their speedup rules) apply unchanged."""
        return GridSpec(self.path, self.experiment, cells, self.data_dir, self.workers, self.description,
                        self.batch_size)

    def trial_count(self) -> int:
        return self.space.grid_size() * self.num_samples if self.search == "grid" else self.num_samples

    def with_overrides(self, *, experiment: str | None = None, limit: int | None = None,
                       trials: int | None = None, data_dir: str | None = None,
                       batch_size: int | None = None) -> "SweepSpec":
        """The command line's --experiment, --limit (per task), --trials, --data-dir and --batch-size."""
        out = self
        if batch_size is not None:
            from ..platform.experiments.spec import check_batch_size

            out = replace(out, batch_size=check_batch_size(batch_size, "--batch-size"))
            problem = batch_metric_problem(out.batch_size, out.metric, out.weights)
            if problem:
                raise RippleError(f"--batch-size {batch_size}: {problem}")
        if experiment is not None:
            out = replace(out, experiment=check_name("experiment", experiment))
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise RippleError(f"--limit must be a positive number of samples per task, got {limit}")
            out = replace(out, tasks=tuple((t, limit if n is None else min(n, limit), o) for t, n, o in out.tasks))
        if trials is not None:
            if out.search == "grid":
                raise RippleError(f"--trials applies to random and optuna searches; this grid search runs all "
                                  f"{out.space.grid_size()} combinations (edit 'space' to change them)")
            if trials < 1:
                raise RippleError(f"--trials must be positive, got {trials}")
            out = replace(out, num_samples=trials)
        if data_dir is not None:
            out = replace(out, data_dir=data_dir)
        return out

    def describe(self) -> str:
        tasks = ", ".join(f"{t} ({'all' if n is None else n}{'' if o == '{}' else ', ' + o})" for t, n, o in self.tasks)
        dims = "; ".join(d.describe() for d in self.space.dims)
        fixed = ", ".join(f"{k}={v}" for k, v in self.space.fixed)
        return (f"sweep {self.experiment}: {self.decoder} on {self.model}, tasks {tasks}; {self.search} search, "
                f"{self.trial_count()} trials over {dims}" + (f"; fixed {fixed}" if fixed else "")
                + f"; {self.metric} ({self.mode})" + ("; with default baseline" if self.baseline else "")
                + (f"; batch size {self.batch_size}" if self.batch_size > 1 else ""))


def batch_metric_problem(batch_size: int, metric: str, weights: tuple[tuple[str, float], ...]) -> str | None:
    """Why a sweep at `batch_size` cannot rank by `metric` (None if it can): TPS and speedup are
    measured on samples decoded alone, so a batched sweep has none; it ranks by throughput."""
    if batch_size == 1:
        return None
    used = [metric] if metric in BATCH1_METRICS else [k for k, _ in weights if k in BATCH1_METRICS]
    if not used:
        return None
    return (f"metric {used[0]!r} is measured at batch 1, and a sweep at batch_size {batch_size} decodes no sample "
            f"alone; use 'throughput' (generated tokens per second across batches) or batch_size 1")


def shipped_sweep_specs() -> list[str]:
    return shipped_names(SPECS_DIR)


def load_sweep_spec(spec: str) -> SweepSpec:
    """Read and validate a sweep spec file (or a shipped spec's name)."""
    path, raw = read_yaml_spec(spec, SPECS_DIR, "sweep")
    return parse_sweep_spec(raw, str(path), default_experiment=f"sweep-{path.stem}")


def parse_sweep_spec(raw: Any, where: str, default_experiment: str = "sweep") -> SweepSpec:
    """Validate a loaded YAML document; every error is one line prefixed by `where`."""
    return _SweepParser(where).sweep(raw, default_experiment)


class _SweepParser(SpecParser):
    """The grid spec's checks (model, tasks, caches, lengths, workers), with sweep wording."""

    def fail(self, message: str) -> RippleError:
        return RippleError(f"sweep spec {self.where}: {message}")

    def one(self, value: Any, key: str, kind: type, default: Any = None) -> Any:
        if value is None:
            return default
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise self.fail(f"{key!r} takes one {kind.__name__} value, got {value!r}")
        return value

    def sweep(self, raw: Any, default_experiment: str) -> SweepSpec:
        from ..decoders import get

        experiment = self.top(raw, TOP_KEYS, ("model", "tasks", "decoder", "gen_length", "block_length"),
                              default_experiment)
        model = self.one(raw["model"], "model", str)
        self.model(model)
        tasks = tuple(self.tasks(raw["tasks"], self.limit(raw.get("limit"), "limit"), [model]))
        decoder = self.one(raw["decoder"], "decoder", str)
        try:
            get(decoder)
        except RippleError as exc:
            raise self.fail(str(exc)) from None
        points = self.positive_ints(raw.get("grid_points", DEFAULT_POINTS), "grid_points")[0]
        try:
            space = derive_space(decoder, raw.get("space"), points=points)
        except RippleError as exc:
            raise self.fail(str(exc)) from None
        search = raw.get("search", "grid")
        if search not in SEARCHES:
            raise self.fail(f"unknown search {search!r}; accepted: {', '.join(SEARCHES)}")
        default_samples = 1 if search == "grid" else 8
        num_samples = self.positive_ints(raw.get("num_samples", default_samples), "num_samples")[0]
        metric = raw.get("metric", "accuracy")
        if metric not in METRICS:
            raise self.fail(f"unknown metric {metric!r}; accepted: {', '.join(METRICS)}")
        mode = raw.get("mode", DEFAULT_MODE[metric])
        if mode not in ("max", "min"):
            raise self.fail(f"'mode' takes max or min, got {mode!r}")
        weights = self.weights(raw.get("weights"), metric)
        baseline = self.flag(raw.get("baseline", True), "baseline")
        if not baseline and (metric == "speedup" or any(k == "speedup" for k, _ in weights)):
            raise self.fail("metric 'speedup' needs the default baseline; set 'baseline: true'")
        gen = self.positive_ints(raw["gen_length"], "gen_length")
        block = self.positive_ints(raw["block_length"], "block_length")
        if len(gen) != 1 or len(block) != 1:
            raise self.fail("a sweep takes one gen_length and one block_length (a grid spec compares several)")
        self.lengths(gen, block)
        cache = self.one(raw.get("cache"), "cache", str, "none")
        self.caches([cache])
        self.decoder_caches(decoder, [cache])
        if baseline:
            self.decoder_caches(BASELINE_DECODER, [cache])
        seed = self.ints(raw.get("seed", 0), "seed")
        if len(seed) != 1:
            raise self.fail("a sweep takes one 'seed'")
        dtype = raw.get("dtype", "auto")
        from ..platform.experiments.spec import DTYPES

        if dtype not in DTYPES:
            raise self.fail(f"unknown dtype {dtype!r}; accepted: {', '.join(DTYPES)}")
        split = self.one(raw.get("split"), "split", str, "test")
        data_dir = self.one(raw.get("data_dir"), "data_dir", str)
        description = self.one(raw.get("description"), "description", str, "")
        concurrent = raw.get("concurrent_trials")
        if concurrent is not None:
            concurrent = self.positive_ints(concurrent, "concurrent_trials")[0]
        batch_size = self.batch_size(raw.get("batch_size", 1))
        problem = batch_metric_problem(batch_size, metric, weights)
        if problem:
            raise self.fail(problem)
        chat, chat_form = self.chat(raw.get("chat", False))
        return SweepSpec(
            path=self.where, experiment=experiment, model=model, tasks=tasks, decoder=decoder, space=space,
            search=search, num_samples=num_samples, metric=metric, mode=mode, weights=weights, baseline=baseline,
            gen_length=gen[0], block_length=block[0], cache=cache, seed=seed[0], dtype=dtype,
            chat=chat, chat_form=chat_form, split=split,
            stop_at_eos=self.flag(raw.get("stop_at_eos", False), "stop_at_eos"),
            eos_early_stop=self.flag(raw.get("eos_early_stop", False), "eos_early_stop"), data_dir=data_dir,
            block_align=self.block_align(raw.get("block_align", "response")),
            sub_block_length=self.sub_block_length(raw.get("sub_block_length"), block),
            workers=self.workers(raw.get("workers", {})), concurrent_trials=concurrent, description=description,
            batch_size=batch_size)

    def weights(self, value: Any, metric: str) -> tuple[tuple[str, float], ...]:
        if value is None:
            if metric == "score":
                raise self.fail(f"metric 'score' needs 'weights', e.g. {{accuracy: 1.0, tps: 0.05}} "
                                f"(accepted keys: {', '.join(WEIGHT_KEYS)})")
            return ()
        if metric != "score":
            raise self.fail("'weights' applies to metric 'score' only")
        if not isinstance(value, dict) or not value:
            raise self.fail(f"'weights' takes a mapping of {', '.join(WEIGHT_KEYS)} to numbers, got {value!r}")
        self.keys(value, WEIGHT_KEYS, " in 'weights'")
        for k, w in value.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)):
                raise self.fail(f"weights.{k} takes a number, got {w!r}")
        return tuple(sorted((k, float(w)) for k, w in value.items()))
