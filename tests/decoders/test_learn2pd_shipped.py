"""`learn2pd`'s shipped filters: a model folder ships one per recipe (learn2pd_filter/, learn2pd_filter_ripple/),
`filter=learn2pd|ripple` picks it, the empty default is Learn2PD's, a path still works, and a model without the
one asked for is refused in one line naming `ripple learn` (by `generate`, and by a grid before it starts).
Tiny filters with seeded weights, written in tmp dirs beside symlinks to ripple-tiny's files."""
import json

import pytest
import torch

from ripple.cli import main
from ripple.decoders import build, get
from ripple.decoders.base import RunShape
from ripple.decoders.filters import RIPPLE_FEATURES, FilterCard, build_filter, file_sha256, save_filter
from ripple.decoders.learn2pd import SHIPPED_BY_RECIPE, filter_path, shipped_filters
from ripple.errors import RippleError
from ripple.platform.runtime.loading import resolve_model_dir


def _model(tmp_path, name: str, recipes: tuple[str, ...]):
    """A checkpoint folder of ripple-tiny's own files (symlinked) shipping filters of `recipes`."""
    src = resolve_model_dir("ripple-tiny")
    folder = tmp_path / name
    folder.mkdir()
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (folder / f).symlink_to(src / f)
    for i, recipe in enumerate(recipes):
        torch.manual_seed(10 + i)
        if recipe == "learn2pd":
            module, card = build_filter("learn2pd", 16), FilterCard("learn2pd", 16, ("confidence",), recipe=recipe)
        else:
            module = build_filter("ripple", None, hidden=4, window=1)
            card = FilterCard("ripple", None, RIPPLE_FEATURES, recipe=recipe)
        save_filter(folder / SHIPPED_BY_RECIPE[recipe], module, card)
    return folder


def _params(**settings):
    return get("learn2pd").Params.from_strings("learn2pd", settings)


def test_filter_learn2pd_or_ripple_picks_the_models_shipped_filter_of_that_recipe(tmp_path):
    both = _model(tmp_path, "both", ("learn2pd", "ripple"))
    assert set(shipped_filters(str(both))) == {"learn2pd", "ripple"}
    shipped = {r: both / SHIPPED_BY_RECIPE[r] for r in ("learn2pd", "ripple")}
    assert filter_path(_params(filter="ripple"), str(both)) == str(shipped["ripple"])
    assert filter_path(_params(filter="learn2pd"), str(both)) == str(shipped["learn2pd"])
    assert filter_path(_params(), str(both)) == str(shipped["learn2pd"])  # the default: Learn2PD's recipe
    assert filter_path(_params(filter="none"), str(both)) is None
    other = tmp_path / "elsewhere"
    assert filter_path(_params(filter=str(other)), str(both)) == str(other)  # a path still works
    cls = get("learn2pd")
    sha = {r: file_sha256(p / "model.safetensors") for r, p in shipped.items()}
    assert sha["learn2pd"] != sha["ripple"]
    # the cell identity holds the sha256 of the file each name picks
    assert cls.artifacts(_params(filter="ripple"), str(both)) == {"filter": sha["ripple"]}
    assert cls.artifacts(_params(filter="learn2pd"), str(both)) == {"filter": sha["learn2pd"]}
    assert cls.artifacts(_params(), str(both)) == {"filter": sha["learn2pd"]}
    assert cls.artifacts(_params(filter="ripple"), None) == {}  # a hub id: its folder is the worker's


@pytest.mark.parametrize("recipe", ["learn2pd", "ripple"])
def test_generate_decodes_with_the_shipped_filter_of_each_recipe(tmp_path, capsys, recipe):
    both = _model(tmp_path, "both", ("learn2pd", "ripple"))
    argv = ["generate", "--model", str(both), "--input-ids", "5,6,7", "--decoder", "learn2pd", "--set",
            f"filter={recipe}", "--device", "cpu", "--gen-length", "16", "--block-length", "16", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["nfe"] >= 1
    decoder = build("learn2pd", {"filter": recipe})
    config = json.loads((both / "config.json").read_text())
    decoder.prepare(RunShape(gen_length=16, block_length=16, n_blocks=(1,), vocab_size=config["vocab_size"],
                             mask_id=config["mask_token_id"], model_dir=str(both)))
    assert decoder._filter.path == str(both / SHIPPED_BY_RECIPE[recipe] / "model.safetensors")
    assert decoder._filter.card.architecture == recipe


def _refused_cli(capsys, argv, *words):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert all(w in captured.err for w in words), captured.err


def test_a_model_without_the_recipes_filter_is_refused_in_one_line(tmp_path, capsys):
    only = _model(tmp_path, "only-learn2pd", ("learn2pd",))
    none = _model(tmp_path, "bare", ())
    base = ["--input-ids", "5,6,7", "--decoder", "learn2pd", "--device", "cpu", "--gen-length", "16",
            "--block-length", "16"]
    _refused_cli(capsys, ["generate", "--model", str(only), *base, "--set", "filter=ripple"],
                 "ships no filter of recipe ripple", "learn2pd_filter_ripple/", "ripple learn train --recipe ripple")
    _refused_cli(capsys, ["generate", "--model", str(none), *base],
                 "ships no filter of recipe learn2pd", "learn2pd_filter/", "ripple learn")
    assert main(["generate", "--model", str(only), *base, "--set", "filter=learn2pd"]) == 0
    capsys.readouterr()


def test_a_grid_refuses_a_recipe_the_model_does_not_ship_before_it_starts(tmp_path):
    from ripple.platform.experiments.spec import parse_spec

    only = _model(tmp_path, "only-learn2pd", ("learn2pd",))
    raw = {"models": [str(only)], "tasks": ["arith"], "limit": 2, "gen_lengths": [48], "block_lengths": [16],
           "decoders": ["default", {"name": "learn2pd", "params": {"filter": "learn2pd"}}]}
    spec = parse_spec(raw, "t")
    learned = [c for c in spec.cells if c.decoder == "learn2pd"]
    assert learned[0].identity()["artifacts"]["filter"] == file_sha256(only / "learn2pd_filter" / "model.safetensors")
    raw["decoders"].append({"name": "learn2pd", "params": {"filter": "ripple"}})
    with pytest.raises(RippleError) as err:
        parse_spec(raw, "t")
    text = str(err.value)
    assert "\n" not in text and "ships no filter of recipe ripple" in text and "ripple learn" in text, text
    assert str(only) in text
