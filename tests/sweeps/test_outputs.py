"""A sweep's outputs from hand-made trials (no Ray, no model): pareto.png draws each trial's accuracy with
its Wilson interval as a bar, on both panels, and the printed table says what the bars are."""
import random

import polars as pl

from ripple.platform.experiments.metrics import cell_metrics
from ripple.platform.experiments.store import ResultStore
from ripple.sweeps.run import SweepRun, TrialResult, format_table, pareto_figure, write_outputs
from ripple.sweeps.spec import parse_sweep_spec
from tests.dashboards import test_report as rep  # its SampleRecord maker
from tests.dashboards.bars import bars, has_interval_legend, wilson_bars

SPEC = {"experiment": "sw", "model": "ripple-tiny", "tasks": {"arith": {"limit": 5}}, "decoder": "confidence",
        "search": "grid", "space": {"tau": [0.5, 0.7, 0.9]}, "baseline": False, "gen_length": 48, "block_length": 16}


def test_pareto_png_draws_each_trials_wilson_interval(tmp_path):
    spec = parse_sweep_spec(SPEC, "t.yaml")
    store = ResultStore(tmp_path, "sw")
    rng = random.Random(5)
    trials, points = [], []
    for i, (tau, correct) in enumerate(((0.5, 2), (0.7, 4), (0.9, 5))):  # correct of 5 samples
        cid = f"confidence-tau{tau}"
        store.append([rep.record(cid, "confidence", rep.params("confidence", tau=tau), "arith", 48, f"s{j}", rng,
                                 experiment="sw", correct=j < correct) for j in range(5)])
        agg = cell_metrics(store.read().filter(pl.col("cell_id") == cid))
        trials.append(TrialResult(f"trial_{i:05d}", (("tau", tau),), (cid,), agg))
        points.append((agg, correct))
    run = SweepRun(spec, store, "sid", trials)
    run.out_dir = write_outputs(run)
    assert (run.out_dir / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = pareto_figure(run)  # the figure pareto.png is written from
    tps_ax, nfe_ax = fig.axes
    assert bars(tps_ax) == wilson_bars((a.tps, c, 5) for a, c in points)
    assert bars(nfe_ax) == wilson_bars((a.mean_nfe, c, 5) for a, c in points)
    assert has_interval_legend(fig)
    assert "plot (bars: each accuracy's 95 % Wilson interval)" in format_table(run)
