"""A worker owns one accelerator and one loaded model, and serves samples routed to it.

`SampleWorker` is a plain class so the same code runs in one process (`make bench`'s
baseline, tests) and as a Ray actor (`ray_worker_class`): on a GPU cluster each actor
asks for `num_gpus=1`, on a CPU-only machine for a CPU count. The model loads once, in
the constructor; every later call decodes and scores one sample and returns a frozen
`SampleRecord`. A failing sample comes back as a record carrying its error, so the
driver stores it instead of losing it.
"""
from __future__ import annotations

import os
import platform as pyplatform
import socket
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..errors import RippleError
from .store import SampleRecord, dumps

if TYPE_CHECKING:
    from ..tasks import Example
    from .spec import Cell


@dataclass(frozen=True)
class WorkItem:
    """What the driver sends for one sample: the cell's settings and the example itself."""

    experiment: str
    run_id: str
    cell: "Cell"
    example: "Example"

    @property
    def key(self) -> tuple[str, str]:
        return self.cell.cell_id, self.example.id

    def record(self, **values: Any) -> SampleRecord:
        """A record with this item's identity and settings, plus `values` (results or an error)."""
        c = self.cell
        values.setdefault("finished_at", time.time())
        return SampleRecord(
            experiment=self.experiment, cell_id=c.cell_id, sample_id=self.example.id, model=c.model, task=c.task,
            decoder=c.decoder, params=c.params_json, run_id=self.run_id, **c.decode_settings(), **values)


def hardware(device) -> str:
    """What decoded the sample, for comparing TPS across machines: the GPU name, or the CPU and threads."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{_cpu_name()} ({torch.get_num_threads()} threads)"


@lru_cache(maxsize=1)
def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return pyplatform.processor() or pyplatform.machine()


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": pyplatform.python_version()}
    for dist in ("ripple-dllm", "torch", "transformers", "ray"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "absent"
    return out


class SampleWorker:
    """One model on one device; `run` decodes and scores one sample (batch 1, as TPS is reported).

    `run` may be called from several threads (the Ray actor allows DEPTH concurrent calls):
    decoding is serialised by a lock, so decode times never overlap, while scoring, which for
    code tasks runs a sandboxed program, overlaps the next sample's decoding."""

    def __init__(self, model: str, dtype: str = "auto", device: str = "auto", threads: int | None = None,
                 data_dir: str | None = None):
        import torch

        from .engine import Engine
        from .loading import load_model

        if threads:
            torch.set_num_threads(threads)  # a CPU worker uses exactly the cores it was given
        self.lm = load_model(model, dtype=dtype, device=device)
        if self.lm.tokenizer is None:
            raise RippleError(f"model {model!r} has no tokenizer; grid tasks need one to build prompts")
        self.engine = Engine.from_loaded(self.lm)
        self.data_dir = data_dir
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.hardware = hardware(self.lm.device)
        self.versions = dumps(library_versions())
        self._tasks: dict[str, Any] = {}
        self._decode = threading.Lock()

    def info(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "pid": os.getpid(), "model": self.lm.name,
                "device": str(self.lm.device), "hardware": self.hardware}

    def _task(self, name: str):
        if name not in self._tasks:
            from ..tasks import get_task

            self._tasks[name] = get_task(name, data_dir=self.data_dir)
        return self._tasks[name]

    def run(self, item: WorkItem) -> SampleRecord:
        import torch

        from ..decoders import build
        from .engine import GenerationConfig
        from .evaluate import run_sample

        cell = item.cell
        where = {"worker_id": self.worker_id, "hardware": self.hardware, "versions": self.versions}
        try:
            if cell.model != self.lm.name:
                raise RippleError(f"worker holds model {self.lm.name!r}, sample needs {cell.model!r}")
            decoder = build(cell.decoder, {k: str(v) for k, v in cell.params})
            config = GenerationConfig(cell.gen_length, cell.block_length, cell.cache, cell.stop_at_eos)
            with self._decode:
                task = self._task(cell.task)
                torch.manual_seed(cell.seed)
                ids, out, text = run_sample(self.engine, self.lm.tokenizer, task, item.example, decoder, config,
                                            chat=cell.chat)
            score = task.score(item.example, text)
        except Exception as exc:  # the failure becomes the stored record (DESIGN: never dropped)
            return item.record(error=f"{type(exc).__name__}: {exc}", **where)
        return item.record(
            prompt_tokens=len(ids), completion=text, generated_tokens=out.generated_tokens, nfe=out.nfe,
            lookahead_nfe=out.lookahead_nfe, decode_seconds=out.decode_seconds, tps=out.tps,
            canvas_tps=out.canvas_tps, correct=bool(score.correct), score=dumps(score.details), **where)


def ray_worker_class(num_cpus: float, num_gpus: float, max_restarts: int, concurrency: int = 2):
    """`SampleWorker` as a Ray actor class: a killed worker restarts (reloading its model) and
    the samples it had in flight are retried on it, up to `max_restarts` times. `concurrency`
    calls run at once (threads), so scoring one sample overlaps decoding the next."""
    import ray

    return ray.remote(SampleWorker).options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=max_restarts,
                                            max_task_retries=max_restarts, max_concurrency=concurrency)
