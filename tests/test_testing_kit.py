"""ripple.testing's trajectory comparer, on the golden LLaDA trajectories: equal cases pass, and a
changed output or NFE is reported by case name (the invariant checks are exercised by
tests/decoders/test_invariants.py and by the guide's plugin in tests/test_plugins.py)."""
import json

from ripple.testing import Mismatch, compare_trajectories


def _cases(golden):
    out = []
    for case in json.loads((golden / "llada-tiny" / "trajectories.json").read_text()):
        parts = case["case"].split("-")
        out.append({**case, "decoder": parts[0], "params": {"tau": parts[1]} if parts[0] == "confidence" else {},
                    "cache": parts[-1] if parts[-1] in ("prefix", "dual") else "none"})
    return out


def test_the_comparer_passes_the_reference_cases_and_names_a_changed_one(golden):
    cases = _cases(golden)
    assert len(cases) >= 7 and compare_trajectories(golden / "llada-tiny", cases) == []
    bad = [dict(cases[0], output=[0] * len(cases[0]["output"])), dict(cases[1], nfe=cases[1]["nfe"] + 1)]
    found = compare_trajectories(golden / "llada-tiny", bad)
    assert [m.case for m in found] == [cases[0]["case"], cases[1]["case"]] and all(isinstance(m, Mismatch) for m in found)
    assert found[0].what.startswith("output") and found[1].what.startswith("NFE")
