"""Start-up costs what it must (issue 44): `import ripple`, `ripple --help`, every command's `--help`
and argument errors import neither torch nor Ray, and loading a model builds its module without the
layers' random initialisers, so nothing imports torch._dynamo (2.5 s of CPU) unless compilation is
asked for. Each check runs in a fresh interpreter: what an earlier test imported must not hide a cost."""
import json
import os
import subprocess
import sys
from pathlib import Path

from ripple.cli import build_parser

REPO = Path(__file__).resolve().parent.parent


def _fresh(code: str) -> dict:
    """Run `code` in a new interpreter; it prints one JSON object as its last line."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


IMPORTED = "{m: m in sys.modules for m in ('torch', 'ray', 'torch._dynamo')}"
LOADED = f"json.dumps({IMPORTED})"


def test_import_ripple_loads_neither_torch_nor_ray():
    found = _fresh(f"import json, sys, ripple; ripple.RippleError; dir(ripple); print({LOADED})")
    assert found == {"torch": False, "ray": False, "torch._dynamo": False}


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return [c for c in sub.choices if c != "lm-eval"]  # lm-eval's help is the harness's own


def test_help_and_argument_errors_load_neither_torch_nor_ray():
    argvs = [["--help"], *([c, "--help"] for c in _commands()), ["generate", "--model", "x"],
             ["eval", "--task", "arith"], ["grid"], ["nosuch"], ["generate", "--model", "x", "--prompt", "y",
                                                                  "--decoder", "rps", "--gen-length", "many"],
             # a decoder's hyperparameters are checked from its dataclass, which needs no torch either
             ["generate", "--model", "ripple-tiny", "--prompt", "y", "--decoder", "confidence", "--set", "tau=2"],
             ["eval", "--model", "ripple-tiny", "--task", "arith", "--decoder", "rpss"], ["decoders", "--json"]]
    assert len(argvs) > 12
    code = f"""
import contextlib, io, json, sys
from ripple.cli import main
codes = []
for argv in {argvs!r}:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            codes.append(main(argv))
        except SystemExit as exc:
            codes.append(exc.code)
print(json.dumps({{"codes": codes, **{IMPORTED}}}))
"""
    found = _fresh(code)
    assert found["codes"] == [0] * (1 + len(_commands())) + [2] * 7 + [0]
    assert (found["torch"], found["ray"]) == (False, False)


def test_loading_models_never_imports_the_compiler(golden):
    from ripple.errors import RippleError
    from ripple.platform.runtime.loading import EMBEDDED, read_config
    from ripple.platform.runtime.models import get_family

    embedded = [name for name, path in EMBEDDED.items() if (path / "model.safetensors").exists()]
    assert {"ripple-tiny", "ripple-tiny-bd"} <= set(embedded)
    checkpoints, causal = [], []
    for path in sorted(p for p in golden.iterdir() if (p / "config.json").exists()):
        try:
            family = get_family(read_config(path)["model_type"])
        except RippleError:
            continue  # a family no branch has brought in yet (its tests fail elsewhere)
        checkpoints.append(str(path))
        if family.causal:  # a verifier (qwen2-verifier-tiny): loaded by load_causal, refused by load_model
            causal.append(str(path))
    causal += [n for n in embedded if get_family(read_config(EMBEDDED[n])["model_type"]).causal]
    assert len(checkpoints) >= 5
    code = f"""
import json, sys
from ripple.platform.runtime.loading import load_causal, load_model
dynamo = []
for name in {[*embedded, *checkpoints]!r}:
    lm = (load_causal if name in {causal!r} else load_model)(name, dtype="float32", device="cpu")
    assert all(not p.is_meta for p in lm.model.parameters())
    dynamo.append("torch._dynamo" in sys.modules)
print(json.dumps({{"dynamo": dynamo, **{IMPORTED}}}))
"""
    found = _fresh(code)
    assert found["dynamo"] == [False] * (len(embedded) + len(checkpoints)) and found["torch"]


def test_a_grid_driver_parses_plans_and_digests_without_torch():
    """A `ripple grid` driver only hands work to Ray workers: parsing the shipped specs (each model's family
    and files checked), planning and digesting the weights import no torch (about 2 s of CPU per driver)."""
    code = f"""
import json, sys
from ripple.api import grid_spec
from ripple.platform.experiments.grid import model_digests, plan
specs = [grid_spec(name) for name in ("demo", "demo-lines", "learned", "field", "rps-ablation")]
items = plan(specs[0])
digests = model_digests(["ripple-tiny", "ripple-tiny-bd", "ripple-tiny-lines"])
print(json.dumps({{"items": len(items), "digests": sorted(digests), **{IMPORTED}}}))
"""
    found = _fresh(code)
    assert found["items"] > 0 and found["digests"] == ["ripple-tiny", "ripple-tiny-bd", "ripple-tiny-lines"]
    assert found["torch"] is False
