"""Search spaces come from the decoders' hyperparameter dataclasses: types, ranges, overrides."""
import pytest
from ray import tune
from ray.tune.search.sample import Categorical, Float, Integer

from ripple.decoders import get
from ripple.errors import RippleError
from ripple.sweeps.spaces import derive_space


def test_default_space_is_every_field_with_a_search_range():
    space = derive_space("rps")
    fields = get("rps").Params.fields_by_name()
    expected = {n for n, f in fields.items() if f.metadata.get("search")}
    assert {d.name for d in space.dims} == expected == {"tau_pivot", "k_max", "r", "lambda"}
    for d in space.dims:
        assert (d.lo, d.hi) == fields[d.name].metadata["search"]  # the dataclass's range, not a copy
        assert d.kind is (int if d.name == "k_max" else float)
    domains = space.param_space("random")
    assert isinstance(domains["k_max"], Integer) and isinstance(domains["lambda"], Float)
    assert (domains["k_max"].lower, domains["k_max"].upper) == (2, 21)  # randint's upper bound is exclusive
    assert (domains["lambda"].lower, domains["lambda"].upper) == (0.0, 0.5)
    grid = space.param_space("grid")
    assert grid["k_max"] == tune.grid_search([2, 11, 20])
    assert all(isinstance(v, int) for v in grid["k_max"]["grid_search"])


def test_overrides_values_ranges_points_and_fixed():
    space = derive_space("rps", {"lambda": [0.0, 0.1, 0.2], "k_max": {"lo": 3, "hi": 9, "points": 4},
                                 "r": {"lo": 0.01, "hi": 0.5, "log": True}, "tau": 0.8})
    dims = {d.name: d for d in space.dims}
    assert set(dims) == {"lambda", "k_max", "r"} and dict(space.fixed) == {"tau": 0.8}
    assert dims["lambda"].grid_values() == [0.0, 0.1, 0.2]
    assert dims["k_max"].grid_values() == [3, 5, 7, 9]
    assert isinstance(space.param_space("random")["lambda"], Categorical)
    r = space.param_space("optuna")["r"]
    assert isinstance(r, Float) and "LogUniform" in type(r.sampler).__name__
    params = space.params_for({"lambda": 0.1, "k_max": 5, "r": 0.123456789})
    assert params.to_dict() == {"tau": 0.8, "tau_pivot": 0.9, "k_max": 5, "r": 0.123457, "lambda": 0.1,
                                "pivot": "truncated_entropy", "carry": True, "edit_tau": 1.0, "max_post_steps": 0}
    assert space.searched(params) == {"lambda": 0.1, "k_max": 5, "r": 0.123457}


def test_other_decoders_derive_their_own_spaces():
    lopa = derive_space("lopa")
    assert [(d.name, d.kind, d.lo, d.hi) for d in lopa.dims] == [("branches", int, 1, 8)]
    klass = derive_space("klass", {"H": {"lo": 1, "hi": 4}, "kappa": {"lo": 0.001, "hi": 0.1}})
    assert {d.name: d.kind for d in klass.dims} == {"H": int, "kappa": float}  # public name H, field `history`


@pytest.mark.parametrize("overrides, message", [
    ({"lambda": [0.1, 200.0]}, "lambda=200.0 is invalid; accepted: float in [0.0, 100.0]"),
    ({"k_max": {"lo": 0, "hi": 5}}, "k_max=0 is invalid; accepted: int in [1, 1000]"),
    ({"k_max": [2.5]}, "k_max takes integers"),
    ({"tau": {"lo": 0.9, "hi": 0.5}}, "'lo' (0.9) must be below 'hi' (0.5)"),
    ({"lamda": [0.1]}, "no hyperparameter 'lamda' (did you mean 'lambda'?)"),
    ({"r": {"lo": 0.0, "hi": 0.5, "log": True}}, "log-scale range needs lo > 0"),
    ({"r": {"low": 0.1}}, "unknown key 'low'"),
    ({"r": {"values": [0.1], "lo": 0.0}}, "either 'values' or 'lo'/'hi'"),
    ({"tau": 0.8}, "fixes every hyperparameter"),
    ({"tau": "high"}, "give a number (fixed), a list of values or a mapping"),
])
def test_invalid_overrides_are_one_line_errors(overrides, message):
    with pytest.raises(RippleError) as exc:
        derive_space("rps", overrides)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_decoder_without_search_metadata_needs_an_explicit_space():
    with pytest.raises(RippleError, match="declares no searchable hyperparameters"):
        derive_space("confidence")
    space = derive_space("confidence", {"tau": None})  # the field's own accepted range [0, 1]
    assert [(d.lo, d.hi) for d in space.dims] == [(0.0, 1.0)]
    with pytest.raises(RippleError, match="no bounded default search range"):
        derive_space("confidence", {"factor": None})  # [0, inf): no default range to sample


def test_a_choice_hyperparameter_is_fixed_by_name_or_searched_over_its_options():
    space = derive_space("rps", {"pivot": ["max_entropy", "truncated_entropy"], "tau": 0.8})
    (dim,) = space.dims
    assert dim.kind is str and dim.grid_values() == ["max_entropy", "truncated_entropy"]
    assert space.params_for({"pivot": "max_entropy"}).pivot == "max_entropy"
    assert [d.grid_values() for d in derive_space("rps", {"pivot": None}).dims] == [
        ["truncated_entropy", "max_entropy", "max_confidence"]]
    fixed = derive_space("rps", {"pivot": "max_confidence", "lambda": [0.0, 0.2]})
    assert dict(fixed.fixed) == {"pivot": "max_confidence"}
    for bad, message in (({"pivot": "best"}, "pivot='best' is invalid; accepted: one of truncated_entropy"),
                         ({"pivot": {"lo": 0, "hi": 1}}, "pivot: give one value"),
                         ({"pivot": [1]}, "pivot takes one of truncated_entropy, max_entropy, max_confidence")):
        with pytest.raises(RippleError, match=message):
            derive_space("rps", bad)


def test_a_text_hyperparameter_is_searched_over_the_values_given():
    """learn2pd's `filter` is free text (a shipped filter's name or a path): a list is a dimension of those
    values, and without one there is nothing to search (one line, not a traceback)."""
    space = derive_space("learn2pd", {"filter": ["learn2pd", "ripple"], "threshold": [0.9, 0.96]})
    assert {d.name: d.grid_values() for d in space.dims} == {"filter": ["learn2pd", "ripple"], "threshold": [0.9, 0.96]}
    assert space.params_for({"filter": "ripple", "threshold": 0.9}).filter == "ripple"
    for bad, message in (({"filter": None, "threshold": 0.9}, "filter: give one value .* text"),
                         ({"filter": [1]}, "filter takes text, got 1")):
        with pytest.raises(RippleError, match=message):
            derive_space("learn2pd", bad)


def test_a_flag_hyperparameter_is_fixed_by_a_boolean_or_searched_over_true_and_false():
    space = derive_space("rps", {"carry": None, "tau": 0.8})
    (dim,) = space.dims
    assert (dim.name, dim.kind, dim.grid_values()) == ("carry", bool, [True, False])
    assert isinstance(space.param_space("random")["carry"], Categorical)
    assert space.params_for({"carry": False}).carry is False
    assert derive_space("rps", {"carry": [False], "tau": [0.8, 0.9]}).dims[0].grid_values() == [False]
    fixed = derive_space("rps", {"carry": False, "lambda": [0.0, 0.2]})
    assert dict(fixed.fixed) == {"carry": False} and [d.name for d in fixed.dims] == ["lambda"]
    for bad, message in (({"carry": "no"}, "carry: give one value .* true, false"),
                         ({"carry": [1, 0]}, "carry takes true or false, got 1"),
                         ({"carry": {"lo": 0, "hi": 1}}, "carry: give one value")):
        with pytest.raises(RippleError, match=message):
            derive_space("rps", bad)


def test_choice_hyperparameters_are_searched_over_their_values():
    space = derive_space("eb_sampler", {"order": None, "gamma": 0.5})
    (dim,) = space.dims
    assert (dim.name, dim.kind, dim.grid_values()) == ("order", str, ["entropy", "confidence"])
    assert isinstance(space.param_space("random")["order"], Categorical)
    assert space.params_for({"order": "confidence"}).to_dict() == {"gamma": 0.5, "order": "confidence"}
    fixed = derive_space("eb_sampler", {"order": "confidence", "gamma": [0.1, 1.0]})
    assert dict(fixed.fixed) == {"order": "confidence"} and [d.name for d in fixed.dims] == ["gamma"]
    with pytest.raises(RippleError, match="order='random' is invalid; accepted: one of entropy, confidence"):
        derive_space("eb_sampler", {"order": ["entropy", "random"]})
    with pytest.raises(RippleError, match="order: give one value"):
        derive_space("eb_sampler", {"order": {"lo": 0}})
