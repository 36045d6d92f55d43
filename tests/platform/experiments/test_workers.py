"""The worker's throughput mode without Ray: a batch of one cell's samples in one engine call gives
each sample the record it gets alone, plus the batch it came from; the driver cuts batches per cell."""
import json

import pytest

from ripple.platform.experiments.demo import demo_spec
from ripple.platform.experiments.grid import batches, plan
from ripple.platform.experiments.metrics import cell_metrics
from ripple.platform.experiments.spec import parse_spec
from ripple.platform.experiments.store import to_frame
from ripple.platform.experiments.workers import SampleWorker

pytestmark = pytest.mark.slow  # loads ripple-tiny and the three tasks (about 20 s)


@pytest.fixture(scope="module")
def worker():
    return SampleWorker("ripple-tiny", dtype="float32", threads=1)


@pytest.fixture(scope="module")
def items():
    return plan(demo_spec(limit=5))


def _cell(items, task, decoder):
    return [it for it in items if it.cell.task == task and it.cell.decoder == decoder]


@pytest.mark.parametrize("task,decoder", [("arith", "rps"), ("pyfunc", "wino")])
def test_a_batch_gives_every_sample_its_batch1_record_and_names_its_batch(worker, items, task, decoder):
    cell = _cell(items, task, decoder)
    alone = [worker.run(it) for it in cell]
    batch = worker.run_batch(cell[:4], 4) + worker.run_batch(cell[4:], 4)  # a cell's last batch may be short
    same = ("completion", "nfe", "lookahead_nfe", "generated_tokens", "correct", "score", "prompt_tokens", "cell_id",
            "sample_id")
    assert [[getattr(r, f) for f in same] for r in batch] == [[getattr(r, f) for f in same] for r in alone]
    assert all(r.error is None for r in batch + alone)
    assert [r.batch_size for r in alone] == [1] * 5 and len({r.batch_id for r in alone}) == 5
    assert [r.batch_size for r in batch] == [4] * 5 and len({r.batch_id for r in batch}) == 2
    first = batch[:4]
    assert len({r.batch_id for r in first}) == 1 and len({r.batch_seconds for r in first}) == 1
    assert first[0].batch_seconds == max(r.decode_seconds for r in first)  # the batch's first forward to last commit
    assert all(r.batch_seconds == r.decode_seconds for r in alone)
    m = cell_metrics(to_frame(batch))
    assert (m.batch_size, m.batches, m.tps) == (4, 2, None)
    assert m.throughput == pytest.approx(sum(r.generated_tokens for r in batch) / (batch[0].batch_seconds
                                                                                  + batch[4].batch_seconds))


def test_a_batch_takes_one_cell_and_a_failure_is_every_samples_record(worker, items):
    mixed = _cell(items, "arith", "default")[:2] + _cell(items, "arith", "confidence")[:1]
    records = worker.run_batch(mixed, 3)
    assert [r.error for r in records] == ["RippleError: a batch takes samples of one cell only"] * 3
    assert [r.sample_id for r in records] == [it.example.id for it in mixed] and worker.run_batch([]) == []


def test_the_driver_cuts_batches_within_cells_in_plan_order(items):
    cut = batches(items, 4)
    assert all(len({it.cell.cell_id for it in b}) == 1 for b in cut)  # never across cells
    assert [len(b) for b in cut] == [4, 1] * 27  # 5 samples per cell (27 cells): a full batch, then the rest
    assert [it for b in cut for it in b] == items  # every sample once, in plan order
    assert batches(items[::-1], 8)[0][0] is items[-1] and len(batches(items, 1)) == len(items)


def test_a_cells_task_options_are_the_limits_its_program_runs_under(worker, shared):
    """`tasks: {humaneval: {timeout_s: ...}}` in a spec reaches the sandbox that scores the sample."""
    base = {"models": ["ripple-tiny"], "decoders": ["confidence"], "gen_lengths": [16], "block_lengths": [16],
            "data_dir": str(shared / "data")}
    default, = plan(parse_spec({**base, "tasks": {"humaneval": {"limit": 1}}}, "t"))
    tight, = plan(parse_spec({**base, "tasks": {"humaneval": {"limit": 1, "timeout_s": 0.001}}}, "t"))
    assert tight.cell.cell_id != default.cell.cell_id and tight.example == default.example
    plain, limited = worker.run(default), worker.run(tight)
    assert plain.completion == limited.completion and plain.task_options == "{}"
    assert limited.task_options == '{"timeout_s":0.001}'  # stored with the record
    assert not json.loads(plain.score)["timed_out"]  # the 3 s default
    assert json.loads(limited.score)["timed_out"] and json.loads(limited.score)["error"] == "timed out after 0.001s"
