"""The metrics module: closed-form intervals and tests on constructed records."""
import math

import numpy as np
import polars as pl
import pytest

from ripple.platform.experiments.metrics import (RESAMPLES, CellMetrics, _ratio_of_sums, aup, aup_weight, cell_metrics,
                                                mcnemar_exact, paired_ratio_interval, summarize_cells, wilson)


def records(cell, correct, nfe=10, tokens=20, seconds=1.0, errors=0):
    n = len(correct)
    rows = [{"cell_id": cell, "sample_id": f"s{i}", "correct": c, "error": None, "nfe": nfe, "generated_tokens": tokens,
             "decode_seconds": seconds, "gen_length": 48} for i, c in enumerate(correct)]
    rows += [{"cell_id": cell, "sample_id": f"e{i}", "correct": None, "error": "boom", "nfe": None,
              "generated_tokens": None, "decode_seconds": None, "gen_length": 48} for i in range(errors)]
    return pl.DataFrame(rows, schema={"cell_id": pl.String, "sample_id": pl.String, "correct": pl.Boolean,
                                      "error": pl.String, "nfe": pl.Int64, "generated_tokens": pl.Int64,
                                      "decode_seconds": pl.Float64, "gen_length": pl.Int64})


def test_wilson_interval_matches_the_closed_form():
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(49.0, abs=0.05) and hi == pytest.approx(94.3, abs=0.05)
    assert wilson(0, 0) == (0.0, 100.0)
    lo, hi = wilson(0, 20)
    assert lo == 0.0 and hi == pytest.approx(16.11, abs=0.01)


def test_the_statistics_equal_scipys():
    """Wilson, the exact McNemar p-value and the paired percentile bootstrap against scipy.stats itself
    (the definitions they write out), to the last few bits (scipy's normal quantile and quantile
    interpolation round differently in the last place)."""
    from scipy.stats import binomtest, bootstrap

    for n in (1, 2, 7, 40, 200):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
            assert wilson(k, n) == pytest.approx((100 * ci.low, 100 * ci.high), rel=1e-12, abs=1e-12)
            cell, base = [True] * k + [False] * (n - k), [False] * k + [True] * (n - k)
            assert mcnemar_exact(cell, base) == pytest.approx(binomtest(k, n, 0.5).pvalue, rel=1e-12)
    rng = np.random.default_rng(3)
    for seed, n in enumerate((2, 3, 10, 57)):
        data = tuple(rng.integers(1, 100, n).astype(float) for _ in range(4))
        ref = bootstrap(data, _ratio_of_sums, paired=True, vectorized=True, n_resamples=RESAMPLES,
                        confidence_level=0.95, method="percentile", rng=np.random.default_rng(seed))
        got = paired_ratio_interval(*data, seed=seed)
        assert got == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), rel=1e-12)


def test_exact_mcnemar_on_a_hand_computed_case():
    # 1 sample right only for the cell, 5 right only for the baseline, 4 agreeing:
    # p = 2 * P(X <= 1), X ~ Bin(6, 1/2) = 2 * (1 + 6) / 64
    cell = [True] + [False] * 5 + [True, True, False, False]
    base = [False] + [True] * 5 + [True, True, False, False]
    assert mcnemar_exact(cell, base) == pytest.approx(14 / 64)
    assert mcnemar_exact([True, False], [True, False]) == 1.0


def test_cell_metrics_count_errors_apart_and_sum_tokens_over_seconds():
    m = cell_metrics(records("c", [True] * 8 + [False] * 2, nfe=12, tokens=30, seconds=0.5, errors=3))
    assert (m.n, m.errors, m.correct, m.accuracy) == (10, 3, 8, 80.0)
    assert m.tps == pytest.approx(300 / 5.0) and m.canvas_tps == pytest.approx(480 / 5.0) and m.mean_nfe == 12
    assert m.accuracy_text() == f"80.0 ±{(m.accuracy_hi - m.accuracy_lo) / 2:.1f}" == "80.0 ±22.7"
    assert m.speedup is None and m.p_value is None


def test_speedups_carry_paired_bootstrap_intervals_and_the_baseline_is_exactly_one():
    base = records("b", [True] * 10, nfe=40, tokens=20, seconds=2.0)
    fast = records("f", [True] * 10, nfe=10, tokens=20, seconds=0.5)
    # per-sample times that vary: the interval must be non-degenerate and contain the estimate
    mixed = fast.with_columns(pl.Series("decode_seconds", [0.2, 0.9, 0.4, 0.6, 0.3, 0.8, 0.5, 0.7, 0.1, 0.5]))
    frame = pl.concat([base, fast, mixed.with_columns(pl.lit("m").alias("cell_id"))])
    out = summarize_cells(frame, {"b": "b", "f": "b", "m": "b"})
    assert out["b"].speedup == 1.0 and out["b"].p_value is None
    f = out["f"]
    assert (f.speedup, f.speedup_lo, f.speedup_hi) == pytest.approx((4.0, 4.0, 4.0))
    assert (f.nfe_speedup, f.nfe_speedup_lo, f.nfe_speedup_hi) == pytest.approx((4.0, 4.0, 4.0))
    assert f.p_value == 1.0 and f.shared == 10 and not f.significant
    m = out["m"]
    assert m.speedup == pytest.approx(4.0) and m.speedup_lo < m.speedup < m.speedup_hi
    assert summarize_cells(frame, {"m": "b"})["m"] == m  # seeded: the same records give the same interval


def test_a_significant_accuracy_difference_is_flagged():
    base = records("b", [True] * 20)
    worse = records("w", [False] * 12 + [True] * 8)
    m = summarize_cells(pl.concat([base, worse]), {"w": "b"})["w"]
    assert m.p_value == pytest.approx(2 * 0.5 ** 12) and m.significant
    assert set(m.metrics()) >= {"accuracy", "accuracy_lo", "accuracy_hi", "speedup", "p_value", "nfe_speedup_lo"}


def batched(cell, sizes_and_seconds, tokens=20, nfe=10):
    """A cell decoded in batches: [(rows, wall seconds)] -> records; every row also gets the batch's
    time as its own decode time (rows of a batch finish together)."""
    rows = []
    for b, (n, seconds) in enumerate(sizes_and_seconds):
        rows += [{"cell_id": cell, "sample_id": f"s{b}-{i}", "correct": True, "error": None, "nfe": nfe,
                  "generated_tokens": tokens, "decode_seconds": seconds, "gen_length": 48, "batch_size": 4,
                  "batch_id": f"{cell}-{b}", "batch_seconds": seconds} for i in range(n)]
    return pl.DataFrame(rows, schema={"cell_id": pl.String, "sample_id": pl.String, "correct": pl.Boolean,
                                      "error": pl.String, "nfe": pl.Int64, "generated_tokens": pl.Int64,
                                      "decode_seconds": pl.Float64, "gen_length": pl.Int64, "batch_size": pl.Int64,
                                      "batch_id": pl.String, "batch_seconds": pl.Float64})


def test_throughput_divides_tokens_by_the_batches_wall_time_and_tps_stays_a_batch1_figure():
    m = cell_metrics(batched("c", [(4, 2.0), (4, 2.0), (2, 1.0)]))  # a cell of 10: batches of 4, 4 and 2
    assert (m.batch_size, m.batches, m.n, m.mean_nfe) == (4, 3, 10, 10)
    assert m.throughput == pytest.approx(10 * 20 / 5.0)  # not 200 / (10 rows x their 2 s each)
    assert m.tps is None and m.canvas_tps is None  # no sample was decoded alone: no latency figure
    alone = cell_metrics(records("c", [True] * 4, tokens=20, seconds=0.5))  # records before batches: batch 1
    assert (alone.batch_size, alone.batches) == (1, 4) and alone.throughput == alone.tps == pytest.approx(40.0)


def test_speedup_compares_batch1_samples_only():
    alone = {"batch_size": 1, "batch_id": None, "batch_seconds": None}
    base = records("b", [True] * 4, tokens=20, seconds=2.0).with_columns(
        pl.lit(v, dtype=t).alias(k) for (k, v), t in zip(alone.items(), (pl.Int64, pl.String, pl.Float64)))
    fast = records("f", [True] * 2, tokens=20, seconds=0.5).with_columns(
        pl.lit(v, dtype=t).alias(k) for (k, v), t in zip(alone.items(), (pl.Int64, pl.String, pl.Float64)))
    fast_batched = batched("f", [(2, 0.1)]).with_columns(pl.Series("sample_id", ["s2", "s3"]))  # 2 rows in 0.1 s
    out = summarize_cells(pl.concat([base, fast, fast_batched]), {"b": "b", "f": "b"})["f"]
    assert out.tps == pytest.approx(40 / 1.0) and out.speedup == pytest.approx(4.0)  # the two batch-1 samples
    assert (out.speedup_lo, out.speedup_hi) == pytest.approx((4.0, 4.0))  # paired over batch-1 pairs only
    assert out.n == 4 and out.shared == 4 and out.nfe_speedup == pytest.approx(1.0)  # accuracy, NFE: every sample
    assert out.batch_size == 4 and out.throughput == pytest.approx(40 / 0.1)


def test_tpf_pools_tokens_over_forwards_across_the_cell_and_skips_errors():
    frame = records("c", [True, False], errors=2).with_columns(pl.Series("generated_tokens", [10, 30, None, None]),
                                                               pl.Series("nfe", [5, 10, None, None]))
    m = cell_metrics(frame)
    assert m.tpf == pytest.approx(40 / 15)  # total / total, not the mean of the per-sample ratios (2.5)
    assert cell_metrics(records("z", [True], nfe=0)).tpf is None  # no forward: nothing to divide by
    assert CellMetrics.from_metrics(m.metrics()) == m  # tpf crosses JSON and MLflow like the other metrics


def test_aup_of_one_point_is_rho_times_y():
    out = aup([(2.5, 40.0)], y_max=90.0)
    assert out.aup == pytest.approx(100.0) and out.points == ((2.5, 40.0),) and out.dropped == ()


def test_aup_drops_points_below_y1_minus_5_and_weights_the_trapezoids():
    # given unsorted; sorted by TPF: (1, 80), (2, 74), (3, 79); 74 < 80 - 5 leaves the curve
    out = aup([(3.0, 79.0), (1.0, 80.0), (2.0, 74.0)], y_max=90.0)
    w79, w80 = math.exp(-3 * (1 - 79 / 90)), math.exp(-3 * (1 - 80 / 90))
    assert out.aup == pytest.approx(1 * 80 + (3 - 1) * (79 * w79 + 80 * w80) / 2)
    assert out.aup == pytest.approx(192.0727, abs=1e-4)  # by hand: 80 + 2 * (79 * 0.69304 + 80 * 0.71653) / 2
    assert out.points == ((1.0, 80.0), (3.0, 79.0)) and out.dropped == ((2.0, 74.0),)


def test_aup_weight_clamps_to_one_above_y_max():
    assert aup_weight(60.0, 50.0) == 1.0 and aup_weight(50.0, 50.0) == 1.0 and aup_weight(40.0, 50.0) < 1.0
    assert aup([(1.0, 60.0), (2.0, 58.0)], y_max=50.0).aup == pytest.approx(60 + (60 + 58) / 2)
    with pytest.raises(ValueError, match="positive TPF"):
        aup([(0.0, 50.0)], y_max=50.0)
