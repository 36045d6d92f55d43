"""MLflow tracking of a grid: one run per cell under the experiment.

Params are every setting of the cell (and each decoder hyperparameter), metrics its
aggregates (accuracy, mean NFE, TPF, TPS, speedup vs Default), the cell's sample table is
the run's artifact, and its task is the run's dataset input (name, a digest of the problem
ids, the source the data came from, the split as context), so the runs table's Dataset
column names what each cell was scored on and can be filtered by it. The default store is a
SQLite file beside the result store with an explicit artifact directory (MLflow 3 refuses the file store and would otherwise put
artifacts under whichever directory the experiment was created from). Logging is
idempotent: a cell's run is found by its `ripple_cell_id` tag and updated, so re-running a
grid never duplicates runs.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import polars as pl

from ...errors import RippleError
from .store import no_space

if TYPE_CHECKING:
    from .metrics import CellSummary

CELL_TAG = "ripple_cell_id"
EXPERIMENT_KIND_TAG, MODEL_DEVELOPMENT = "mlflow.experimentKind", "custom_model_development"


def tracking_uri(store_dir: str | os.PathLike, override: str | None = None) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///<store>/mlflow.db."""
    if override:
        return override
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{Path(store_dir).expanduser().resolve() / 'mlflow.db'}"


def artifact_root(uri: str) -> str | None:
    """Artifacts beside a SQLite database (mlartifacts/); a tracking server keeps its own root."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    return None


def _quiet() -> None:
    # first use of a SQLite store runs schema migrations that log at INFO on stderr
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent"):
        logging.getLogger(name).setLevel(logging.WARNING)


class Tracker:
    """The MLflow experiment of one grid experiment."""

    def __init__(self, client, experiment_id: str, uri: str):
        self.client = client
        self.experiment_id = experiment_id
        self.uri = uri
        self._logged: dict[str, dict[str, float]] = {}  # cell id -> metrics this tracker already logged
        # cell id -> run id: searched once, then kept by this tracker (a grid logs cells as they finish; one
        # search per finished cell made logging quadratic in the cells, and a grid's driver lock keeps other
        # writers out of the experiment meanwhile)
        self._runs: dict[str, str] | None = None
        self._inputs: dict[str, set[tuple[str, str]]] = {}  # run id -> (name, digest) of its dataset inputs

    @classmethod
    def open(cls, experiment: str, store_dir: str | os.PathLike, override_uri: str | None = None) -> "Tracker":
        _quiet()
        from mlflow.entities import LifecycleStage
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri = tracking_uri(store_dir, override_uri)
        created = None  # a SQLite file this call creates: removed again if it cannot be set up
        if uri.startswith("sqlite:///"):
            db = Path(uri.removeprefix("sqlite:///"))
            db.parent.mkdir(parents=True, exist_ok=True)
            created = None if db.exists() else db
        try:
            client = MlflowClient(tracking_uri=uri)  # creates (migrates) a SQLite store: may hit a full disk
            exp = client.get_experiment_by_name(experiment)
            if exp is None:
                exp_id = client.create_experiment(experiment, artifact_location=artifact_root(uri))
            else:
                exp_id = exp.experiment_id
                if exp.lifecycle_stage == LifecycleStage.DELETED:
                    client.restore_experiment(exp_id)
            # MLflow 3 opens an experiment on a GenAI overview unless it is marked as model development
            client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, MODEL_DEVELOPMENT)
        except Exception as exc:  # MLflow's errors and its database layer's (SQLAlchemy, sqlite3, OSError)
            import sqlite3

            from sqlalchemy.exc import SQLAlchemyError

            if created is not None:  # a half-migrated new database would refuse every later run
                created.unlink(missing_ok=True)
            full = disk_full(uri, exc)
            if full is not None:
                raise full from None
            if isinstance(exc, MlflowException):
                raise RippleError(f"MLflow tracking store {uri} is unusable ({exc.message.splitlines()[0]})") from None
            if not isinstance(exc, (SQLAlchemyError, sqlite3.Error, OSError)):
                raise
            first = str(exc).splitlines()[0][:200]
            raise RippleError(f"MLflow tracking store {uri} is unusable ({first}); move it aside, give another "
                              f"--tracking-uri, or run with --no-tracking") from None
        return cls(client, exp_id, uri)

    def runs_by_cell(self) -> dict[str, str]:
        """cell id -> run id of every run of this experiment that carries the cell tag."""
        out: dict[str, str] = {}
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], max_results=1000, page_token=token)
            for r in page:
                cid = r.data.tags.get(CELL_TAG)
                if cid and cid not in out:
                    out[cid] = r.info.run_id
            token = page.token
            if not token:
                return out

    def log_cells(self, summaries: list["CellSummary"], records: pl.DataFrame, spec_path: str = "",
                  data_dir: str | None = None) -> dict[str, str]:
        """Create or update one run per cell; returns cell id -> run id. `data_dir`: the grid's local
        benchmark data, named as the dataset's source (else $RIPPLE_DATA_DIR, else the hub).
        A full disk under the tracking store stops the caller with one line (`disk_full`)."""
        with _one_line_when_full(self.uri):
            return self._log_cells(summaries, records, spec_path, data_dir)

    def _log_cells(self, summaries, records: pl.DataFrame, spec_path: str, data_dir: str | None) -> dict[str, str]:
        from mlflow.entities import Metric, Param, RunTag

        if self._runs is None:
            self._runs = self.runs_by_cell()
        existing = self._runs
        fails = _failures(records)
        out = {}
        with tempfile.TemporaryDirectory(prefix="ripple-cell-") as tmp:
            for s in summaries:
                c = s.cell
                values = {**s.metrics(), **fails.get(c.cell_id, {})}
                if self._logged.get(c.cell_id) == values:  # unchanged since this grid logged it
                    out[c.cell_id] = existing[c.cell_id]
                    continue
                run_id = existing.get(c.cell_id)
                table = records.filter(pl.col("cell_id") == c.cell_id).sort("sample_id")
                start_ms, end_ms = _span_ms(table)
                params: dict[str, object] = {}
                if run_id is None:
                    tags = {CELL_TAG: c.cell_id, "ripple_spec": spec_path, "mlflow.runName": run_name(s)}
                    run_id = self.client.create_run(self.experiment_id, start_time=start_ms, tags=tags).info.run_id
                    params = {k: v for k, v in c.settings.items() if k != "params"}
                    params.update({f"decoder.{k}": v for k, v in c.params})
                    params["params"] = c.params_json
                    existing[c.cell_id] = run_id
                    self._inputs[run_id] = set()  # a new run has no dataset input yet
                else:
                    self.client.update_run(run_id, status="RUNNING")
                now = _now_ms()
                self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()],
                                      params=[Param(k, str(v)) for k, v in params.items()],  # a new run's only
                                      tags=[RunTag("ripple_hardware", _hardware(records, c.cell_id))])
                dataset = task_dataset(c.task, c.split, table["sample_id"].to_list(), data_dir)
                self._log_dataset(run_id, dataset, c.split)
                cell_dir = Path(tmp) / c.cell_id
                cell_dir.mkdir()
                table.write_parquet(cell_dir / "samples.parquet")
                # the MLflow UI previews CSV as a table (decode traces stay in the Parquet file)
                table.drop("trace").write_csv(cell_dir / "samples.csv")
                self.client.log_artifact(run_id, str(cell_dir / "samples.parquet"))
                self.client.log_artifact(run_id, str(cell_dir / "samples.csv"))
                self.client.set_terminated(run_id, "FINISHED", end_time=end_ms)
                self._logged[c.cell_id] = values
                out[c.cell_id] = run_id
        return out

    def _log_dataset(self, run_id: str, dataset, split: str) -> None:
        """The run's dataset input, once per (name, digest): re-logging a cell adds none."""
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        if run_id not in self._inputs:  # a run an earlier invocation made: ask the store once
            self._inputs[run_id] = {(d.dataset.name, d.dataset.digest)
                                    for d in self.client.get_run(run_id).inputs.dataset_inputs}
        if (dataset.name, dataset.digest) in self._inputs[run_id]:
            return
        self.client.log_inputs(run_id, [DatasetInput(dataset._to_mlflow_entity(),
                                                     tags=[InputTag(MLFLOW_DATASET_CONTEXT, split)])])
        self._inputs[run_id].add((dataset.name, dataset.digest))

    def end_unfinished(self, status: str, tag: str = CELL_TAG) -> None:
        """Mark every run of this experiment carrying `tag` (a grid's cell runs; a sweep's runs) that is
        still RUNNING (a grid stopped while logging it, a sweep stopped at any point) as `status` (KILLED
        on a signal, FAILED on an error), so the UI never shows a dead run as live."""
        from mlflow.exceptions import MlflowException

        try:
            runs = self.client.search_runs([self.experiment_id], filter_string="attributes.status = 'RUNNING'",
                                           max_results=1000)
            for r in runs:
                if tag in r.data.tags:
                    self.client.set_terminated(r.info.run_id, status)
        except Exception as exc:  # e.g. the disk that stopped the grid holds the database too
            if not isinstance(exc, MlflowException) and disk_full(self.uri, exc) is None:
                raise
            logging.getLogger(__name__).warning(f"MLflow runs of {self.uri} not marked {status} ({str(exc)[:200]})")


def disk_full(uri: str, exc: BaseException) -> RippleError | None:
    """The one-line error for a tracking store whose disk is full (SQLite says "database or disk is
    full", the OS ENOSPC/EDQUOT, anywhere in the exception's chain), else None: decoded samples are
    in the result store already."""
    cause = exc
    while cause is not None:
        if no_space(cause) or "disk is full" in str(cause):
            return RippleError(f"MLflow tracking store {uri} is full (no space left on device); samples decoded so "
                               f"far are kept in the result store; free space and re-run to resume "
                               f"(or run with --no-tracking)")
        cause = cause.__cause__ or cause.__context__
    return None


@contextmanager
def _one_line_when_full(uri: str) -> Iterator[None]:
    """Turn a full disk under the tracking store into `disk_full`'s line; other errors pass."""
    try:
        yield
    except Exception as exc:
        full = disk_full(uri, exc)
        if full is None:
            raise
        raise full from None


def task_dataset(task: str, split: str, sample_ids: list[str], data_dir: str | None = None):
    """`task` as an MLflow dataset: named by the task, its digest the sha256 of the sorted problem ids
    (two cells scored on the same problems share it), its source the hub dataset (with the local
    directory it was read from, when one was in effect) or, for a generated task, the generator."""
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.huggingface_dataset_source import HuggingFaceDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    from ...tasks import task_class
    from ...tasks.data import data_dir as local_data_dir

    digest = hashlib.sha256("\n".join(sorted(set(sample_ids))).encode()).hexdigest()[:16]
    try:
        cls = task_class(task)
    except RippleError:  # a task no longer registered (an old store): name it, nothing more is known
        return MetaDataset(CodeDatasetSource({"task": task, "split": split}), name=task, digest=digest)
    hub = getattr(cls, "hub_ids", ())
    if hub:
        local = local_data_dir(data_dir)
        source = HuggingFaceDatasetSource(hub[0], split=split, data_dir=str(local) if local else None)
    else:
        source = CodeDatasetSource({"generator": f"{cls.__module__}.{cls.__qualname__}", "split": split})
    return MetaDataset(source, name=task, digest=digest)


def ui_command(store_dir: str | os.PathLike, override_uri: str | None, port: int) -> tuple[list[str], dict[str, str]]:
    """The `mlflow server` command line and environment behind `ripple ui`: localhost only, one
    worker and no job runners (about 460 MB instead of 2.5 GB), on the grid's tracking store."""
    import sys

    uri = tracking_uri(store_dir, override_uri)
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        if not db.exists():
            raise RippleError(f"no MLflow store at {db}; run `ripple grid` with --store {Path(store_dir)} first, "
                              f"or pass --store/--tracking-uri")
    if not 1 <= port <= 65535:
        raise RippleError(f"--port must be in 1..65535, got {port}")
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    root = artifact_root(uri)
    if root:
        cmd += ["--default-artifact-root", root]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    return cmd, env


def ui_url(port: int, experiment_id: str | None = None) -> str:
    """Where the UI shows runs tables: MLflow 3 opens on its GenAI views unless the URL (or the
    browser's remembered choice) asks for the model-training workflow."""
    page = f"experiments/{experiment_id}/runs" if experiment_id else "experiments"
    return f"http://127.0.0.1:{port}/#/{page}?workflowType=machine_learning"


def run_name(s: "CellSummary") -> str:
    c = s.cell
    model = c.model.rstrip("/").split("/")[-1]
    return f"{model} {c.task} {c.label()} g{c.gen_length}b{c.block_length} {c.cache}"


def _failures(records: pl.DataFrame) -> dict[str, dict[str, float]]:
    """Cell id -> its parallel-failure metrics (cells with traces and a `default` cell with traces)."""
    from .metrics import baseline_ids, failure_metrics, parallel_failures
    from .spec import Cell

    if not records.height or records["trace"].is_null().all():
        return {}
    firsts = records.unique(subset="cell_id", keep="first")
    cells = {r["cell_id"]: Cell.from_record(r) for r in firsts.iter_rows(named=True)}
    return {cid: failure_metrics(n) for cid, n in parallel_failures(records, baseline_ids(cells)).items()}


def _hardware(records: pl.DataFrame, cell_id: str) -> str:
    hw = records.filter(pl.col("cell_id") == cell_id)["hardware"].drop_nulls().unique().sort().to_list()
    return "; ".join(hw) or "unknown"


def _span_ms(table: pl.DataFrame) -> tuple[int | None, int | None]:
    """When the cell's samples were computed: from the first decode's start to the last finish
    (unix ms), so a run's duration in the UI is the cell's, not the few milliseconds of logging."""
    done = table.filter(pl.col("finished_at").is_not_null())
    if done.height == 0:
        return None, None
    starts = done["finished_at"] - done["decode_seconds"].fill_null(0.0)
    return int(starts.min() * 1000), int(done["finished_at"].max() * 1000)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
