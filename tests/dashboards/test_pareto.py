"""Pareto fronts on constructed examples: dominance, ties, missing values, both senses."""
import math

import pytest

from ripple.dashboards.pareto import ACCURACY_NFE, ACCURACY_TPS, dominates, front_flags, pareto_front


def test_dominated_points_leave_the_front():
    # (accuracy, tps): b dominates d (better on both); c trades accuracy for speed; a is dominated by b
    pts = [(50.0, 10.0), (60.0, 20.0), (40.0, 80.0), (55.0, 15.0), (40.0, 70.0)]
    assert pareto_front(pts, ACCURACY_TPS) == [1, 2]
    assert front_flags(pts, ACCURACY_TPS) == [False, True, True, False, False]


def test_equal_on_one_axis_better_on_the_other_dominates():
    pts = [(60.0, 20.0), (60.0, 25.0), (61.0, 25.0)]
    assert pareto_front(pts, ACCURACY_TPS) == [2]


def test_identical_points_tie_and_stay_together():
    pts = [(70.0, 30.0), (70.0, 30.0), (50.0, 10.0)]
    assert pareto_front(pts, ACCURACY_TPS) == [0, 1]


def test_single_point_and_empty_input():
    assert pareto_front([(12.0, 3.0)], ACCURACY_TPS) == [0]
    assert pareto_front([], ACCURACY_TPS) == []


def test_minimised_axis_for_nfe():
    # (accuracy, mean NFE): fewer forwards is better
    pts = [(80.0, 48.0), (80.0, 20.0), (70.0, 10.0), (60.0, 30.0)]
    assert pareto_front(pts, ACCURACY_NFE) == [1, 2]
    assert dominates((80.0, 20.0), (80.0, 48.0), ACCURACY_NFE)
    assert not dominates((80.0, 48.0), (80.0, 20.0), ACCURACY_NFE)


def test_missing_values_are_never_on_the_front_and_do_not_dominate():
    pts = [(None, 100.0), (50.0, math.nan), (10.0, 1.0)]
    assert pareto_front(pts, ACCURACY_TPS) == [2]


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError):
        pareto_front([(1.0, 2.0)], ("max", "up"))
    with pytest.raises(ValueError):
        pareto_front([(1.0, 2.0, 3.0)], ACCURACY_TPS)
