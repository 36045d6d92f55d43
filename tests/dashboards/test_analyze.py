"""The ripple-effect analysis: the core measurement on a scripted model whose entropies are
known in closed form (so the expected reductions, ranks and visited states are exact), the
engine-backed probe for both logit layouts, and `ripple analyze` on ripple-tiny."""
import csv
import json
import math

import pytest
import torch
from PIL import Image

from ripple.cli import main
from ripple.dashboards.analyze import (RipplePoint, analyze_example, block_entropy, measure_state, rank_bucket,
                                       summarize, terciles)
from ripple.decoders.base import entropy
from ripple.platform.runtime.engine import Engine
from ripple.testing import ScriptedModel, spread

V, MASK, EOS = 8, 7, 6
PROMPT = [1, 2]
ORACLE = [1, 2, 3, 4]  # block of 4 = the whole response
TOP = [1, 2, 5, 4]  # position 2's most likely token is 5, not its oracle 3 (oracle rank 2)
BASE = [0.5, 0.3, 0.4, 0.2]  # top-1 probability with nothing decoded
GAIN = 0.15  # each visible block position holding its oracle token raises the others' top-1 by this


def prob(j: int, decoded: dict[int, int]) -> float:
    """Top-1 probability of block position j when `decoded` ({block position: token}) is visible."""
    return BASE[j] + GAIN * sum(1 for k, t in decoded.items() if k != j and t == ORACLE[k])


def h(j: int, decoded: dict[int, int]) -> float:
    return float(entropy(torch.softmax(spread(V, TOP[j], prob(j, decoded)).double(), -1)))


def script_for(shift: int):
    def script(pos, visible):
        j = pos + shift - len(PROMPT)  # the block position this query row predicts
        if not 0 <= j < len(ORACLE):
            return torch.zeros(V)
        seen = {p - len(PROMPT): t for p, t in visible if len(PROMPT) <= p and t != MASK}
        return spread(V, TOP[j], prob(j, seen))
    return script


def expected_points() -> list[dict]:
    """Walk the default order by hand: commit the most confident masked position, oracle token."""
    out, decoded = [], {}
    for step in range(len(ORACLE) - 1):
        masked = [j for j in range(len(ORACLE)) if j not in decoded]
        if step >= 1 and len(masked) >= 2:
            for i in masked:
                after = {**decoded, i: ORACLE[i]}
                others = [j for j in masked if j != i]
                red = sum(h(j, decoded) - h(j, after) for j in others) / len(others)
                out.append({"decoded": step, "position": i, "entropy_before": h(i, decoded), "reduction": red,
                            "others": len(others), "rank": 2 if TOP[i] != ORACLE[i] else 1,
                            "oracle_prob": prob(i, decoded) if TOP[i] == ORACLE[i]
                            else (1 - prob(i, decoded)) / (V - 1)})
        nxt = max(masked, key=lambda j: (prob(j, decoded), -j))
        decoded[nxt] = ORACLE[nxt]
    return out


@pytest.mark.parametrize("shift", [0, 1])
def test_reductions_ranks_and_states_on_a_scripted_model(shift):
    model = ScriptedModel(V, script_for(shift), shift=shift)
    engine = Engine(model, mask_id=MASK, eos_ids=(EOS,), pad_id=0)
    points, states, agree, chosen = analyze_example(engine, "ex", PROMPT, ORACLE, block_length=4)
    want = expected_points()
    # hand walk: commit 0 (p .5), measure {1,2,3}; commit 2 (p .55), measure {1,3}; commit 1; 3 last
    assert [(p.decoded, p.position) for p in points] == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 3)]
    assert [(w["decoded"], w["position"]) for w in want] == [(p.decoded, p.position) for p in points]
    for p, w in zip(points, want):
        assert p.entropy_before == pytest.approx(w["entropy_before"], abs=1e-6)
        assert p.reduction == pytest.approx(w["reduction"], abs=1e-6)
        assert p.reduction > 0  # a committed oracle token makes every other position more certain here
        assert (p.others, p.rank) == (w["others"], w["rank"])
        assert p.oracle_prob == pytest.approx(w["oracle_prob"], rel=1e-5)
    assert states == 2
    # chosen commits: 0, 2, 1 (3 is forced); at 2 the oracle token 3 is not the top-1 (5)
    assert (agree, chosen) == (2, 3)
    assert model.calls == 3  # one batched forward per chosen commit, variants packed as a batch
    chunked = analyze_example(engine, "ex", PROMPT, ORACLE, block_length=4, batch_size=1)
    assert chunked == (points, states, agree, chosen)  # --batch-size only splits the forwards


def test_measure_state_averages_only_other_masked_positions_and_skips_the_mask_id():
    L = 4
    anchor = torch.stack([spread(V, 1, 0.9), spread(V, 2, 0.5), spread(V, 3, 0.5), spread(V, 4, 0.5)])
    anchor[1, MASK] = 50.0  # the model's own mask-id logit must not count in the oracle's rank
    masked = torch.tensor([False, True, True, True])
    after = anchor.clone()[None].repeat(2, 1, 1)  # [m, L, V]
    after[0, 2] = spread(V, 3, 0.99)  # committing 1 sharpens 2 ...
    after[0, 0] = spread(V, 1, 0.1)  # ... and flattens decoded position 0, which must not count
    after[1, 1] = spread(V, 2, 0.99)  # committing 3 sharpens 1
    positions = torch.tensor([1, 3])
    oracle = torch.tensor([1, 2, 3, 0])  # position 3's oracle 0 is one of the tied runners-up
    res = measure_state(anchor, block_entropy(after), masked, positions, oracle, MASK)
    H = lambda lg: float(entropy(torch.softmax(lg.double(), -1)))  # noqa: E731
    assert res[0]["others"] == 2 and res[1]["others"] == 2
    assert res[0]["reduction"] == pytest.approx((H(anchor[2]) - H(after[0, 2])) / 2)
    assert res[1]["reduction"] == pytest.approx((H(anchor[1]) - H(after[1, 1])) / 2)
    assert res[0]["rank"] == 1 and res[1]["rank"] == 2
    assert res[0]["entropy_before"] == pytest.approx(H(anchor[1]))
    assert L == masked.numel()


def test_terciles_and_summary_on_known_points():
    pts = [RipplePoint("e", 0, 1, i, float(i), float(10 - i), 2, rank, 0.5)
           for i, rank in enumerate([1, 1, 2, 3, 1, 7, 2, 1, 1])]
    low, mid, high = terciles(pts)
    assert [p.position for p in mid] == [3, 4, 5]
    s = summarize(pts)
    assert s["points"] == 9
    assert s["terciles"]["mid"]["mean_reduction"] == pytest.approx((7 + 6 + 5) / 3)
    assert s["mid_entropy_not_top1_fraction"] == pytest.approx(2 / 3)
    assert s["rank_counts"] == {"1": 5, "2": 2, "3-5": 1, ">5": 1}
    assert [rank_bucket(r) for r in (1, 2, 3, 5, 6)] == ["1", "2", "3-5", "3-5", ">5"]


def test_nontrivial_terciles_leave_out_near_certain_points():
    entropies = [0.0, 0.01, 0.05, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]  # three at or below 0.05 nats
    pts = [RipplePoint("e", 0, 1, i, h, 10.0 * h, 2, 1 if i % 2 else 2, 0.5) for i, h in enumerate(entropies)]
    s = summarize(pts)
    nt = s["nontrivial_terciles"]
    assert sum(nt[k]["points"] for k in ("low", "mid", "high")) == 8  # 0.2 .. 0.9
    assert nt["low"]["entropy_min"] == 0.2 and nt["mid"]["entropy_min"] == 0.5 and nt["mid"]["entropy_max"] == 0.6
    assert nt["mid"]["mean_reduction"] == pytest.approx(5.5)
    assert nt["mid"]["not_top1_fraction"] == pytest.approx(0.5)  # positions 6 (rank 2) and 7 (rank 1)
    assert s["terciles"]["low"]["entropy_min"] == 0.0  # the plain terciles still cover every point


@pytest.mark.slow
def test_ripple_analyze_on_ripple_tiny(tmp_path, capsys):
    out = tmp_path / "an"
    assert main(["analyze", "--model", "ripple-tiny", "--task", "arith", "--limit", "2", "--out", str(out),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    s = json.loads((out / "summary.json").read_text())
    assert printed["points"] == s["points"] > 0 and s["examples"] == 2
    with Image.open(out / "ripple-effect.png") as im:
        im.verify()
    assert "ripple-effect.png" in (out / "summary.md").read_text()
    with (out / "points.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == s["points"]
    for r in rows:
        assert float(r["entropy_before"]) >= 0 and math.isfinite(float(r["reduction"]))
        assert int(r["others"]) == 16 - int(r["decoded"]) - 1  # every other masked position of the block
        assert 1 <= int(r["decoded"]) <= 14 and int(r["rank"]) >= 1 and 0 <= float(r["oracle_prob"]) <= 1
    t = s["terciles"]
    assert sum(t[k]["points"] for k in ("low", "mid", "high")) == s["points"]
    assert t["low"]["entropy_max"] <= t["mid"]["entropy_min"] <= t["mid"]["entropy_max"] <= t["high"]["entropy_min"]
    for k in ("low", "mid", "high"):
        assert 0 <= t[k]["not_top1_fraction"] <= 1
    assert 0 <= s["mid_entropy_not_top1_fraction"] <= 1
    nt = s["nontrivial_terciles"]
    assert sum(nt[k]["points"] for k in ("low", "mid", "high")) == sum(float(r["entropy_before"]) > 0.05 for r in rows)
    assert "non-trivial (H > 0.05) mid" in (out / "summary.md").read_text()
    assert sum(s["rank_counts"].values()) == s["points"]
    # with the default oracle the replayed order is the default decoder's own trajectory
    assert s["commit_agreement"] >= 0.95


@pytest.mark.parametrize("argv, text", [
    (["--model", "no-such-model", "--task", "arith"], "no-such-model"),
    (["--model", "ripple-tiny", "--task", "arithm"], "arithm"),
    (["--model", "ripple-tiny", "--task", "arith", "--limit", "0"], "--limit"),
    (["--model", "ripple-tiny", "--task", "arith", "--gen-length", "50"], "not divisible"),
])
def test_bad_input_is_one_line_and_exit_2(argv, text, tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["analyze", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert text in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_a_model_without_tokenizer_is_refused_before_its_weights_load(golden, monkeypatch, capsys):
    def forbidden(*args, **kwargs):
        raise AssertionError("the weights loaded before the model was refused")

    monkeypatch.setattr("ripple.platform.runtime.loading.load_model", forbidden)
    assert main(["analyze", "--model", str(golden / "llada-tiny"), "--task", "arith", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert err == f"ripple analyze: error: model '{golden / 'llada-tiny'}' has no tokenizer; tasks need one to build prompts\n"
