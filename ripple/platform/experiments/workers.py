"""A worker owns one accelerator and one loaded model, and serves samples routed to it.

`SampleWorker` is a plain class so the same code runs in one process (`make bench`'s
baseline, tests) and as a Ray actor (`ray_worker_class`): on a GPU cluster each actor
asks for `num_gpus=1`, on a CPU-only machine for a CPU count. The model loads once, in
the constructor (a second model that a decoder's configuration names, a verifier, once on the first
batch that needs it: ripple/platform/runtime/auxiliary.py); every later call decodes a batch of
samples of one cell in one engine call (throughput mode; a batch of one is the latency setting TPS
is reported at), scores
them and returns one frozen `SampleRecord` each. A failing sample comes back as a record
carrying its error, so the driver stores it instead of losing it.
"""
from __future__ import annotations

import json
import os
import platform as pyplatform
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ...errors import RippleError
from .store import SampleRecord, dumps

if TYPE_CHECKING:
    from ...tasks import Example
    from .spec import Cell


@dataclass(frozen=True)
class WorkItem:
    """What the driver sends for one sample: the cell's settings and the example itself."""

    experiment: str
    run_id: str
    cell: "Cell"
    example: "Example"
    traces: bool = False  # keep the sample's decode trace with its record (a spec's `traces: true`)

    @property
    def key(self) -> tuple[str, str]:
        return self.cell.cell_id, self.example.id

    def record(self, **values: Any) -> SampleRecord:
        """A record with this item's identity and settings, plus `values` (results or an error)."""
        c = self.cell
        values.setdefault("finished_at", time.time())
        return SampleRecord(
            experiment=self.experiment, cell_id=c.cell_id, sample_id=self.example.id, model=c.model, task=c.task,
            decoder=c.decoder, params=c.params_json, run_id=self.run_id, plugins=c.plugins, **c.decode_settings(),
            **values)


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
    """One model on one device; `run_batch` decodes and scores a batch of one cell's samples.

    `run_batch` may be called from several threads (the Ray actor allows DEPTH concurrent calls):
    decoding is serialised by a lock, so decode times never overlap, while scoring, which for
    code tasks runs a sandboxed program, overlaps the next batch's decoding."""

    def __init__(self, model: str, dtype: str = "auto", device: str = "auto", threads: int | None = None,
                 data_dir: str | None = None, weights: str | None = None):
        import torch

        from ..runtime.auxiliary import AuxiliaryModels
        from ..runtime.engine import Engine
        from ..runtime.loading import load_model, require_tokenizer, weights_digest

        if threads:
            torch.set_num_threads(threads)  # a CPU worker uses exactly the cores it was given
        require_tokenizer(model)  # a hub id's, which the spec could not check; before the weights load
        self.lm = load_model(model, dtype=dtype, device=device)
        self.engine = Engine.from_loaded(self.lm)
        # second models beside the dLLM that a decoder's configuration names (a verifier): each loaded once
        # per worker and model, on the first batch that needs it, on this worker's device and dtype
        self.aux = AuxiliaryModels(self.lm)
        self.data_dir = data_dir
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.hardware = hardware(self.lm.device)
        self.versions = dumps(library_versions())
        # stamped on every record: which checkpoint decoded it. The driver passes the digest it took of a
        # local checkpoint (no second read of every weight byte per worker); a hub download is digested here.
        self.weights = weights or weights_digest(self.lm.path)
        self.engine.weights = self.weights  # decoders that check a file's model (a learned filter) read it
        self._tasks: dict[tuple[str, str], Any] = {}
        self._decode = threading.Lock()

    def info(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "pid": os.getpid(), "model": self.lm.name,
                "device": str(self.lm.device), "hardware": self.hardware,
                "weights": self.weights}

    def _task(self, name: str, options: str = "{}"):
        """The task instance a cell scores with: one per (task, its spec options JSON)."""
        if (name, options) not in self._tasks:
            from ...tasks import get_task

            self._tasks[name, options] = get_task(name, data_dir=self.data_dir, **json.loads(options))
        return self._tasks[name, options]

    def run(self, item: WorkItem) -> SampleRecord:
        """One sample alone (batch 1)."""
        return self.run_batch([item])[0]

    def run_batch(self, items: list[WorkItem], batch_size: int | None = None) -> list[SampleRecord]:
        """Decode `items` (samples of one cell) in one engine call and score each; one record per item.

        `batch_size` is the setting recorded with them (default: len(items); a cell's last batch
        may hold fewer samples than the setting). The batch's wall time, from its first forward
        to its last commit, is stored on each of its records with a batch id: throughput divides
        by it. A decoding failure fails every sample of the batch; a scoring failure only its own."""
        import torch

        from ..runtime.auxiliary import digests_json
        from ..runtime.engine import GenerationConfig
        from ..runtime.tracing import TraceRecorder
        from .evaluate import drawn_seed, run_batch, strict_of

        if not items:
            return []
        cell = items[0].cell
        where = {"worker_id": self.worker_id, "hardware": self.hardware, "versions": self.versions,
                 "weights": self.weights}
        batch = {"batch_size": batch_size or len(items), "batch_id": uuid.uuid4().hex[:16]}
        try:
            if any(it.cell.cell_id != cell.cell_id for it in items):
                raise RippleError("a batch takes samples of one cell only")
            if cell.model != self.lm.name:
                raise RippleError(f"worker holds model {self.lm.name!r}, sample needs {cell.model!r}")
            decoder = cell.make_decoder()
            config = GenerationConfig(cell.gen_length, cell.block_length, cell.cache, cell.stop_at_eos, cell.eos_early_stop,
                                      block_align=cell.block_align, sub_block_length=cell.sub_block_length)
            rec = TraceRecorder(len(items)) if items[0].traces else None
            with self._decode:
                # the second models it names (a verifier): loaded once per worker, refused before decoding
                where["aux_weights"] = digests_json(self.aux.attach(decoder, self.engine.auxiliary))
                task = self._task(cell.task, cell.task_options)
                torch.manual_seed(cell.seed)
                decoded = run_batch(self.engine, self.lm.tokenizer, task, [it.example for it in items], decoder,
                                    config, chat=cell.prompt_chat, seed=cell.seed, trace=rec)
            traces = [t.dumps() for t in rec.traces()] if rec else [None] * len(items)
        except Exception as exc:  # the failure becomes the stored records (DESIGN: never dropped)
            return [it.record(error=f"{type(exc).__name__}: {exc}", **where, **batch) for it in items]
        batch["batch_seconds"] = max(out.decode_seconds for _, out, _ in decoded)  # rows share the clock
        records = []
        for item, (ids, out, text), trace in zip(items, decoded, traces):
            try:
                score = task.score(item.example, text)
            except Exception as exc:
                records.append(item.record(error=f"{type(exc).__name__}: {exc}", **where, **batch))
                continue
            records.append(item.record(
                prompt_tokens=len(ids), completion=text, generated_tokens=out.generated_tokens, nfe=out.nfe,
                lookahead_nfe=out.lookahead_nfe, edits=out.edits, encoder_nfe=out.encoder_nfe,
                reference_nfe=out.reference_nfe, verifier_nfe=out.verifier_nfe,
                floor_nfe=task.floor_nfe(item.example), sample_seed=drawn_seed(decoder, cell.seed, item.example.id),
                decode_seconds=out.decode_seconds, tps=out.tps, canvas_tps=out.canvas_tps, correct=bool(score.correct),
                score=dumps(score.details), score_strict=strict_of(score.details), trace=trace, **where,
                **batch))
        return records


def ray_worker_class(num_cpus: float, num_gpus: float, max_restarts: int, concurrency: int = 2):
    """`SampleWorker` as a Ray actor class: a killed worker restarts (reloading its model) and
    the samples it had in flight are retried on it, up to `max_restarts` times. `concurrency`
    calls run at once (threads), so scoring one sample overlaps decoding the next."""
    import ray

    return ray.remote(SampleWorker).options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=max_restarts,
                                            max_task_retries=max_restarts, max_concurrency=concurrency)
