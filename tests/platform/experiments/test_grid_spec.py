"""Grid specs: every shipped spec validates; a malformed one is one clear line and exit 2, with
nothing written; cell ids are stable hashes of the settings."""
import pickle
from dataclasses import replace

import pytest

from ripple.errors import RippleError
from ripple.cli import main
from ripple.decoders import decoders_for, get, names
from ripple.platform.experiments.spec import load_spec, parse_spec, shipped_specs
from ripple.tasks import task_names
from ripple.decoders import filters as F
from ripple.decoders.learn2pd import SHIPPED_BY_RECIPE

BENCHMARKS = ["gsm8k", "math500", "humaneval", "mbpp"]
PAPER_MODELS = ["GSAI-ML/LLaDA-8B-Instruct", "Dream-org/Dream-v0-Instruct-7B"]
PAPER_DECODERS = ["default", "confidence", "klass", "eb_sampler", "wino", "lopa", "rps"]  # the paper's seven
DEMO_DECODERS = PAPER_DECODERS + ["sequential"]  # the demo's (the field's newer ones: `ripple grid field`)
FIELD_DECODERS = ["dinfer_threshold", "hierarchy", "credit", "pc_sampler", "dus", "slow_fast"]


def test_every_shipped_spec_validates():
    assert shipped_specs() == ["apd", "demo", "demo-lines", "diffusion-gemma", "fast-dllm-v2", "field", "field-lines", "kv-cache",
                              "learned", "length-robustness", "lines", "llada2", "llada2.1", "oracle", "oracle-lines",
                              "paper-table1", "parallelbench", "rps-ablation", "rps-carry", "rps-carry-lines",
                              "rps-tiny", "sdar", "tiny-bd"]
    for name in shipped_specs():
        spec = load_spec(name)
        assert spec.cells and {c.task for c in spec.cells} <= set(task_names())
        assert {c.decoder for c in spec.cells} <= set(names())


def test_shipped_specs_have_the_issue_contents():
    apd = load_spec("apd")  # issue 58: APD with ripple-tiny-ar beside default, confidence, rps and the oracle
    assert {(c.model, c.task, c.limit, c.gen_length) for c in apd.cells} == {
        ("ripple-tiny", t, 200, 48) for t in ("arith", "pyfunc", "freefunc")}
    assert {(c.decoder, c.block_length, c.cache) for c in apd.cells} == {
        ("default", 16, "none"), ("confidence", 16, "none"), ("rps", 16, "none"), ("oracle", 16, "none"),
        ("apd", 48, "sliding")}  # APD: one block, its own cache policy
    settings = {(dict(c.params)["mixture"], dict(c.params)["max_lookahead"]) for c in apd.cells if c.decoder == "apd"}
    assert settings == {(r, m) for r in (0.5, 0.7, 0.9) for m in (4, 16)}
    assert {(dict(c.params)["verifier"], dict(c.params)["temperature"]) for c in apd.cells if c.decoder == "apd"} == {
        ("ripple-tiny-ar", 0.0)}
    demo = load_spec("demo")
    models = {"ripple-tiny", "ripple-tiny-bd"}
    assert {c.model for c in demo.cells} == models and {c.task for c in demo.cells} == {"arith", "pyfunc", "freefunc"}
    for model in models:  # the paper's decoders and sequential on both embedded models, beside the oracle
        assert sorted({c.decoder for c in demo.cells if c.model == model}) == sorted(DEMO_DECODERS + ["oracle"])
    # plus LLaDA2.1's Quality and Speedy editing on ripple-tiny-bd
    editing = {(c.model, c.task, dict(c.params)["tau"], dict(c.params)["edit_tau"], dict(c.params)["max_post_steps"])
               for c in demo.cells if c.decoder == "confidence" and dict(c.params)["edit_tau"] < 1}
    assert editing == {("ripple-tiny-bd", t, *s) for t in ("arith", "pyfunc", "freefunc")
                       for s in ((0.7, 0.5, 16), (0.5, 0.0, 16))}
    assert len(demo.cells) == 3 * (len(DEMO_DECODERS) + 1) * 2 + 6
    field = load_spec("field")  # every mask decoder beside the oracle, both embedded models, 200 per cell (issue 59)
    assert set(FIELD_DECODERS + DEMO_DECODERS + ["topk", "oracle"]) <= {c.decoder for c in field.cells}
    # learned decoders (learn2pd) read a filter trained for a model and block length: their own grid runs them
    # (and so does apd, whose verifier is named per model: `ripple grid apd`)
    unlearned = [n for n in decoders_for("mask") if not (get(n).learned or get(n).Params.auxiliary_fields())]
    assert {c.decoder for c in field.cells} == set(unlearned)
    assert {(c.model, c.task) for c in field.cells} == {(m, t) for m in models for t in ("arith", "pyfunc", "freefunc")}
    assert len(field.cells) == 6 * len(unlearned) and {c.limit for c in field.cells} == {200}
    defaults = {c.decoder: c.params for c in field.cells}  # each decoder at its defaults (the oracle follows default)
    assert all(dict(p) == get(d).Params().to_dict() for d, p in defaults.items())
    field_lines = load_spec("field-lines")  # the same decoders on ripple-tiny-lines' ten operations
    assert {c.decoder for c in field_lines.cells} == set(unlearned)
    assert {c.model for c in field_lines.cells} == {"ripple-tiny-lines"} and len({c.task for c in field_lines.cells}) == 10
    assert {(c.gen_length, c.block_length, c.limit) for c in field_lines.cells} == {(32, 32, 200)}
    assert all(dict(p) == get(d).Params().to_dict() for d, p in ((c.decoder, c.params) for c in field_lines.cells))
    ablation = load_spec("rps-ablation")
    rps = {(dict(c.params)["pivot"], dict(c.params)["lambda"]) for c in ablation.cells if c.decoder == "rps"}
    assert rps == {(p, lam) for p in ("truncated_entropy", "max_entropy", "max_confidence") for lam in (0.0, 0.2)}
    # ... each with the carried step on (Algorithm 1) and off (issue 59)
    rps = [(dict(c.params)["pivot"], dict(c.params)["lambda"], dict(c.params)["carry"], c.task)
           for c in ablation.cells if c.decoder == "rps"]
    assert sorted(rps) == sorted((p, lam, carry, t) for p in ("truncated_entropy", "max_entropy", "max_confidence")
                                 for lam in (0.0, 0.2) for carry in (True, False) for t in ("freefunc", "arith"))
    # the carry grids: default, rps with carry on and off, the oracle following default; 200 problems, traces
    carry_specs = {"rps-carry": ("ripple-tiny", {"arith", "pyfunc", "freefunc"}, 48, 16),
                   "rps-carry-lines": ("ripple-tiny-lines", {f"lines/{op}" for op in (
                       "insert_random", "remove_random", "replace_random", "shuffle")}, 32, 32)}
    for name, (model, tasks, gen, block) in carry_specs.items():
        spec = load_spec(name)
        assert {c.model for c in spec.cells} == {model} and {c.task for c in spec.cells} == tasks
        assert {(c.gen_length, c.block_length, c.limit, c.cache) for c in spec.cells} == {(gen, block, 200, "none")}
        assert spec.traces and spec.batch_size == 8 and spec.workers.cpus == 1
        for task in tasks:
            labels = sorted(c.label() for c in spec.cells if c.task == task)
            assert labels == ["default", "oracle", "rps", "rps(carry=False)"], (name, task)
        assert {dict(c.params)["follow"] for c in spec.cells if c.decoder == "oracle"} == {"default"}
        assert len({c.cell_id for c in spec.cells}) == len(spec.cells)  # carry off is a cell of its own
    # the lines ones are the operations with free choices: a floor above one forward
    from ripple.tasks import get_task

    for op in {f"lines/{o}" for o in ("copy", "insert_index", "insert_random", "remove_index", "remove_random",
                                       "replace_index", "replace_random", "reverse", "shuffle", "sort")}:
        task = get_task(op)
        floors = {task.floor_nfe(e) for e in task.examples("test", limit=20)}
        assert (min(floors) > 1) == (op in carry_specs["rps-carry-lines"][1]), (op, floors)
    # the oracle follows default in the three grids it joined (issue 51)
    for spec in (field, field_lines, ablation, load_spec("lines"), demo, load_spec("demo-lines")):
        assert {dict(c.params)["follow"] for c in spec.cells if c.decoder == "oracle"} == {"default"}
    assert {(c.gen_length, c.block_length, c.limit) for c in demo.cells} == {(48, 16, 30)}
    lines = load_spec("lines")  # every decoder on the ten waiting-line operations, 200 problems, gen = block = 32
    ops = {c.task for c in lines.cells}
    assert len(ops) == 10 and all(t.startswith("lines/") for t in ops) and {c.model for c in lines.cells} == {
        "ripple-tiny-lines"}
    assert {(c.gen_length, c.block_length, c.limit) for c in lines.cells} == {(32, 32, 200)}
    # every decoder but the learned ones, which read a filter trained for the model (issue 57's `learned` grid)
    learned = {n for n in decoders_for("mask") if get(n).learned}
    assert learned == {"learn2pd"} and set(decoders_for("mask", "none")) - learned <= {c.decoder for c in lines.cells}
    topk = {(dict(c.params)["rank"], dict(c.params)["k"]) for c in lines.cells if c.decoder == "topk"}
    assert topk == {(r, k) for r in ("confidence", "margin", "entropy", "random") for k in (1, 2, 4, 8)}
    conf = {(dict(c.params)["tau"], dict(c.params)["factor"]) for c in lines.cells if c.decoder == "confidence"}
    assert conf == {(t, 0.0) for t in (0.5, 0.7, 0.9, 1.0)} | {(0.9, f) for f in (1.0, 1.9)}
    assert {dict(c.params)["tau"] for c in lines.cells if c.decoder == "rps"} == {0.9, 0.7, 0.5}
    demo_lines = load_spec("demo-lines")
    assert {c.task for c in demo_lines.cells} == {"lines/copy", "lines/insert_random", "lines/shuffle"}
    assert sorted({c.label() for c in demo_lines.cells}) == ["confidence", "default", "oracle", "rps", "topk(k=4)"]

    table = load_spec("paper-table1")
    assert sorted({c.model for c in table.cells}) == sorted(PAPER_MODELS)
    assert sorted({c.task for c in table.cells}) == sorted(BENCHMARKS)
    for model in PAPER_MODELS:  # all seven decoders for each model, RPS once with its tau_pivot
        cells = [c for c in table.cells if c.model == model and c.task == "gsm8k"]
        assert sorted(c.decoder for c in cells) == sorted(PAPER_DECODERS)
    assert {(c.gen_length, c.block_length) for c in table.cells} == {(256, 32)}
    pivots = {c.model: dict(c.params)["tau_pivot"] for c in table.cells if c.decoder == "rps"}
    assert pivots == {PAPER_MODELS[0]: 0.9, PAPER_MODELS[1]: 0.95}

    # KLASS with the per-task settings of its release's scripts, for both models
    klass = {(c.model, c.task): (dict(c.params)["tau"], dict(c.params)["kappa"], dict(c.params)["H"])
             for c in table.cells if c.decoder == "klass"}
    settings = {"gsm8k": (0.6, 0.015, 2), "math500": (0.6, 0.01, 2), "mbpp": (0.7, 0.01, 2), "humaneval": (0.9, 0.01, 2)}
    assert klass == {(m, t): v for m in PAPER_MODELS for t, v in settings.items()}

    assert {c.gen_length for c in load_spec("length-robustness").cells} == {128, 256, 512}
    kv = load_spec("kv-cache")
    assert {(c.decoder, c.cache) for c in kv.cells} >= {(d, k) for d in ("rps", "confidence") for k in ("none", "prefix")}


def test_the_learned_grid_ranks_each_models_shipped_filters_beside_the_oracle():
    """Issue 57: learn2pd with the shipped filters of both recipes (on the models that ship them) beside
    default, confidence, rps and the oracle, on the three embedded models and their own tasks, 200 each."""
    from ripple.decoders.learn2pd import shipped_filters
    from ripple.platform.runtime.loading import resolve_model_dir

    spec = load_spec("learned")
    tiny_tasks = {"arith", "pyfunc", "freefunc"}
    lines_tasks = {f"lines/{op}" for op in ("copy", "insert_index", "insert_random", "remove_index", "remove_random",
                                            "replace_index", "replace_random", "reverse", "shuffle", "sort")}
    own = {"ripple-tiny": (tiny_tasks, 48, 16), "ripple-tiny-bd": (tiny_tasks, 48, 16),
           "ripple-tiny-lines": (lines_tasks, 32, 32)}
    assert {c.model for c in spec.cells} == set(own) and {(c.limit, c.cache) for c in spec.cells} == {(200, "none")}
    for model, (tasks, gen, block) in own.items():
        cells = [c for c in spec.cells if c.model == model]
        assert {c.task for c in cells} == tasks and {(c.gen_length, c.block_length) for c in cells} == {(gen, block)}
        shipped = sorted(shipped_filters(str(resolve_model_dir(model))))
        assert shipped, model  # every embedded model ships its filters
        for task in tasks:
            labels = sorted(c.label() for c in cells if c.task == task)
            assert labels == sorted(["confidence", "default", "oracle", "rps",
                                     *(f"learn2pd(filter={r})" for r in shipped)]), (model, task)
        for c in cells:  # each learned cell's id holds the sha256 of the shipped filter it reads
            if c.decoder == "learn2pd":
                assert c.identity()["artifacts"]["filter"] == F.file_sha256(
                    resolve_model_dir(model) / SHIPPED_BY_RECIPE[dict(c.params)["filter"]] / "model.safetensors")
    assert {dict(c.params)["follow"] for c in spec.cells if c.decoder == "oracle"} == {"default"}


def test_cell_ids_are_stable_hashes_of_the_settings():
    base = {"models": ["ripple-tiny"], "tasks": ["arith"], "gen_lengths": [48], "block_lengths": [16]}
    plain = parse_spec({**base, "decoders": ["confidence"]}, "t").cells[0]
    explicit = parse_spec({**base, "decoders": [{"name": "confidence", "params": {"tau": 0.9}}]}, "t").cells[0]
    other = parse_spec({**base, "decoders": [{"name": "confidence", "params": {"tau": 0.8}}]}, "t").cells[0]
    limited = parse_spec({**base, "decoders": ["confidence"], "limit": 3}, "t").cells[0]
    assert plain.cell_id == explicit.cell_id == limited.cell_id != other.cell_id
    assert plain.cell_id == "2291ee73f73b122c"  # pinned: a changed hash would orphan every stored result
    # the id is computed once per cell: a copy with another setting, or a cell shipped to a worker, never
    # carries a stale one
    assert replace(plain, seed=1).cell_id not in (plain.cell_id, replace(plain, seed=2).cell_id)
    assert pickle.loads(pickle.dumps(plain)).cell_id == plain.cell_id
    assert replace(plain, seed=0).cell_id == plain.cell_id


def test_task_options_are_part_of_a_cells_identity_only_when_set():
    base = {"models": ["ripple-tiny"], "decoders": ["default"], "gen_lengths": [48], "block_lengths": [16]}
    plain = parse_spec({**base, "tasks": ["humaneval"]}, "t").cells[0]
    mapped = parse_spec({**base, "tasks": {"humaneval": {"limit": 3}}}, "t").cells[0]
    tight = parse_spec({**base, "tasks": {"humaneval": {"timeout_s": 10, "memory_mb": 2048}}}, "t").cells[0]
    assert plain.task_options == mapped.task_options == "{}" and plain.cell_id == mapped.cell_id  # ids as before
    assert tight.task_options == '{"memory_mb":2048,"timeout_s":10}' and tight.cell_id != plain.cell_id
    assert "task_options" not in plain.identity() and tight.identity()["task_options"] == tight.task_options
    both = parse_spec({**base, "tasks": {"humaneval": {"timeout_s": 10}, "arith": None}}, "t")
    assert '  task options: humaneval {"timeout_s":10}\n' in both.describe()
    assert "task options" not in parse_spec({**base, "tasks": ["humaneval"]}, "t").describe()


def test_list_valued_hyperparameters_expand_and_limits_combine():
    spec = parse_spec({"models": ["ripple-tiny"], "tasks": {"arith": {"limit": 7}, "pyfunc": None}, "limit": 20,
                       "decoders": [{"name": "rps", "params": {"lambda": [0.1, 0.2], "k_max": 5}}],
                       "gen_lengths": [48], "block_lengths": [16, 8], "caches": ["none", "prefix"]}, "t")
    assert len(spec.cells) == 2 * 2 * 2 * 2
    assert {c.label() for c in spec.cells} == {"rps(k_max=5, lambda=0.1)", "rps(k_max=5)"}
    assert {(c.task, c.limit) for c in spec.cells} == {("arith", 7), ("pyfunc", 20)}
    assert {(c.task, c.limit) for c in spec.with_limit(10).cells} == {("arith", 7), ("pyfunc", 10)}


def test_per_task_hyperparameters_override_params_for_their_tasks():
    spec = parse_spec({"models": ["ripple-tiny"], "tasks": ["arith", "pyfunc", "freefunc"], "gen_lengths": [48],
                       "block_lengths": [16], "decoders": [
                           {"name": "klass", "params": {"kappa": 0.02, "H": 3},
                            "task_params": {"arith": {"tau": 0.6, "kappa": 0.015}, "pyfunc": {"tau": [0.7, 0.8]}}}]},
                      "t")
    got = sorted((c.task, dict(c.params)["tau"], dict(c.params)["kappa"], dict(c.params)["H"]) for c in spec.cells)
    assert got == [("arith", 0.6, 0.015, 3), ("freefunc", 0.9, 0.02, 3), ("pyfunc", 0.7, 0.02, 3), ("pyfunc", 0.8, 0.02, 3)]
    assert "klass per task: arith tau=0.6 kappa=0.015; pyfunc tau=0.7 kappa=0.02 | tau=0.8 kappa=0.02; " \
           "freefunc tau=0.9 kappa=0.02" in spec.describe()


GOOD = """models: [ripple-tiny]
tasks: [arith]
decoders: [default]
gen_lengths: [48]
block_lengths: [16]
"""

BAD = [
    ("unknown decoder", GOOD.replace("[default]", "[default, confidense]"),
     "unknown decoder 'confidense' (did you mean 'confidence'?); registered: default, confidence"),
    ("bad hyperparameter value", GOOD.replace("[default]", "[{name: confidence, params: {tau: 1.5}}]"),
     "confidence hyperparameter tau=1.5 is invalid; accepted: float in [0.0, 1.0]"),
    ("unknown hyperparameter", GOOD.replace("[default]", "[{name: rps, params: {lamda: 0.1}}]"),
     "decoder 'rps' has no hyperparameter 'lamda'; accepted: tau, tau_pivot, k_max, r, lambda"),
    ("gen not divisible by block", GOOD.replace("[48]", "[50]"),
     "gen_length 50 is not divisible by block_length 16; accepted block lengths: 1, 2, 5, 10, 25, 50"),
    ("unknown key", GOOD + "decoder: [rps]\n", "unknown key 'decoder' (did you mean 'decoders'?); accepted: "),
    ("unknown task", GOOD.replace("[arith]", "[gsm8", 1).replace("[gsm8", "[gsm8]"),
     "unknown task 'gsm8' (did you mean 'gsm8k'?)"),
    ("unknown model", GOOD.replace("[ripple-tiny]", "[ripple-tiny, ripple-huge]"),
     "model 'ripple-huge' not found: give a checkpoint directory, a hub id (org/name) or an embedded name: ripple-tiny"),
    ("unknown cache", GOOD + "caches: [full]\n", "unknown cache policy 'full'; accepted: none, prefix, dual"),
    ("missing key", GOOD.replace("gen_lengths: [48]\n", ""), "missing key 'gen_lengths'"),
    ("wrong type", GOOD.replace("[16]", "[sixteen]"), "'block_lengths' takes positive integers, got 'sixteen'"),
    ("unreadable YAML", GOOD + "caches: [none\n", "is not valid YAML: "),
    ("not a mapping", "- just\n- a list\n", "expected a mapping of keys"),
    ("per-task task not in the grid", GOOD.replace("[default]", "[{name: klass, task_params: {gsm8k: {tau: 0.6}}}]"),
     "decoder 'klass': task_params names task 'gsm8k', which is not in 'tasks': arith"),
    ("per-task typo in a task", GOOD.replace("[default]", "[{name: klass, task_params: {arth: {tau: 0.6}}}]"),
     "decoder 'klass': task_params names task 'arth' (did you mean 'arith'?), which is not in 'tasks': arith"),
    ("per-task unknown hyperparameter", GOOD.replace("[default]", "[{name: klass, task_params: {arith: {kapa: 0.1}}}]"),
     "decoder 'klass' has no hyperparameter 'kapa'; accepted: tau, kappa, H"),
    ("per-task bad value", GOOD.replace("[default]", "[{name: klass, task_params: {arith: {tau: 2}}}]"),
     "klass hyperparameter tau=2.0 is invalid; accepted: float in [0.0, 1.0]"),
    ("per-task not a mapping", GOOD.replace("[default]", "[{name: klass, task_params: {arith: 0.6}}]"),
     "decoder 'klass': 'task_params.arith' takes a mapping of hyperparameters, got 0.6"),
    ("unknown choice", GOOD.replace("[default]", "[{name: eb_sampler, params: {order: entropie}}]"),
     "eb_sampler hyperparameter order='entropie' is invalid; accepted: one of entropy, confidence"),
    ("flag not true or false", GOOD.replace("[default]", "[{name: rps, params: {carry: [true, maybe]}}]"),
     "rps hyperparameter carry='maybe' is invalid; accepted: true or false"),
    ("option a task does not take", GOOD.replace("tasks: [arith]", "tasks: {arith: {limit: 5, timeout_s: 10}}"),
     "unknown key 'timeout_s' in task 'arith'; accepted: limit"),
    ("sandbox option typo", GOOD.replace("tasks: [arith]", "tasks: {humaneval: {timeout: 10}}"),
     "unknown key 'timeout' in task 'humaneval' (did you mean 'timeout_s'?); accepted: limit, gen_lengths, block_lengths, if_data, models, timeout_s, cpu_s, memory_mb"),
    ("bad sandbox limit", GOOD.replace("tasks: [arith]", "tasks: {mbpp: {memory_mb: -5}}"),
     "task mbpp: memory_mb must be a positive number, got -5"),
    ("task restricted to a model not in the grid", GOOD.replace("tasks: [arith]", "tasks: {arith: {models: [ripple-tiny-bd]}}"),
     "task 'arith' is restricted to model 'ripple-tiny-bd', which is not in 'models': ripple-tiny"),
    ("unknown chat form", GOOD + "chat: twoturn\n",
     "'chat' takes false, true (= multiturn), multiturn or singleturn, got 'twoturn'"),
    ("zero batch size", GOOD + "batch_size: 0\n",
     "'batch_size' must be a positive number of samples per engine call (1 = one at a time), got 0"),
    ("batch size list", GOOD + "batch_size: [1, 8]\n", "'batch_size' must be a positive number of samples"),
    # plain YAML would keep the last value silently
    ("top-level key given twice", GOOD + "gen_lengths: [32]\n", "key 'gen_lengths' given twice (line 6; first at line 4)"),
    ("nested key given twice", GOOD.replace("[default]", "\n  - name: rps\n    params:\n      lambda: 0.1\n"
                                              "      tau: 0.8\n      lambda: 0.3"),
     "key 'lambda' given twice (line 8; first at line 6)"),
]


@pytest.mark.parametrize("case,text,message", BAD, ids=[b[0] for b in BAD])
def test_malformed_spec_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, case, text, message):
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    store = tmp_path / "store"
    assert main(["grid", str(spec), "--store", str(store)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1, cap.err
    assert cap.err.startswith(f"ripple grid: error: grid spec {spec}") and message in cap.err, cap.err
    assert not store.exists()


def test_missing_and_unreadable_spec_files(tmp_path, capsys):
    assert main(["grid", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not found; give a YAML file or a shipped spec: apd, demo, demo-lines, diffusion-gemma, fast-dllm-v2, field, field-lines, kv-cache" in err
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    assert main(["grid", str(tmp_path / "binary.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read grid spec" in err
    assert main(["grid", str(tmp_path)]) == 2  # a directory
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read grid spec" in err


def test_dry_run_prints_the_plan_without_ray(capsys):
    assert main(["grid", "paper-table1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "experiment paper-table1, 56 cells" in out and "rps(tau_pivot=0.95)" in out
    assert ("klass per task: gsm8k tau=0.6 kappa=0.015; math500 tau=0.6 kappa=0.01; humaneval tau=0.9 kappa=0.01; "
            "mbpp tau=0.7 kappa=0.01") in out


def test_a_broken_local_checkpoint_fails_before_ray_starts(tmp_path, capsys):
    (tmp_path / "ckpt").mkdir()
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD.replace("[ripple-tiny]", f"[{tmp_path / 'ckpt'}]"))
    assert main(["grid", str(spec), "--store", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"checkpoint {tmp_path / 'ckpt'} has no config.json" in err
    assert not (tmp_path / "store").exists()


def test_what_a_worker_would_refuse_after_loading_is_refused_before_ray_starts(golden, tmp_path, capsys):
    """A decoder for another kind of family than a local or embedded model's, and a local model without
    tokenizer files (tasks build prompts with it): one line from `ripple grid` and RippleError from Python."""
    from tests.platform.runtime.checkpoints import gemma_with_tokenizer

    gemma = gemma_with_tokenizer(golden, tmp_path / "dg")
    cases = [(GOOD.replace("[default]", "[renoise]"), "model 'ripple-tiny': decoder 'renoise' decodes uniform-noise "
              "families; llada is a mask-noise family: use a mask-noise decoder (default, confidence"),
             (GOOD.replace("[ripple-tiny]", f"[{gemma}]"), f"model '{gemma}': decoder 'default' decodes mask-noise "
              "families; diffusion_gemma is a uniform-noise family: use a uniform-noise decoder (renoise)"),
             (GOOD.replace("[ripple-tiny]", f"[{golden / 'llada-tiny'}]"),
              f"model '{golden / 'llada-tiny'}' has no tokenizer; tasks need one to build prompts")]
    for n, (text, message) in enumerate(cases):
        spec = tmp_path / f"s{n}.yaml"
        spec.write_text(text)
        assert main(["grid", str(spec), "--store", str(tmp_path / "store")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"ripple grid: error: grid spec {spec}: {message}"), err
        with pytest.raises(RippleError, match="^grid spec"):
            load_spec(str(spec))
    assert not (tmp_path / "store").exists()
    # a decoder entry restricted to the models it decodes is fine
    both = parse_spec({"models": ["ripple-tiny", str(gemma)], "tasks": ["arith"], "gen_lengths": [16],
                       "block_lengths": [16], "decoders": [{"name": "default", "models": ["ripple-tiny"]},
                                                          {"name": "renoise", "models": [str(gemma)]}]}, "t")
    assert sorted((c.model, c.decoder) for c in both.cells) == [(str(gemma), "renoise"), ("ripple-tiny", "default")]


def test_batch_size_is_a_spec_key_and_a_flag_but_no_part_of_any_cell_id(tmp_path, capsys):
    base = {"models": ["ripple-tiny"], "tasks": ["arith"], "gen_lengths": [48], "block_lengths": [16],
            "decoders": ["confidence", "rps"]}
    one, eight = parse_spec(base, "t"), parse_spec({**base, "batch_size": 8}, "t")
    assert (one.batch_size, eight.batch_size, one.with_batch_size(4).batch_size) == (1, 8, 4)
    # batching changes timing, never tokens: a sample keeps its key, so a grid resumes across batch sizes
    assert [c.cell_id for c in one.cells] == [c.cell_id for c in eight.cells]
    assert one.cells[0].cell_id == "2291ee73f73b122c"
    assert main(["grid", "demo", "--batch-size", "8", "--dry-run"]) == 0
    assert "batch size: 8" in capsys.readouterr().out
    store = tmp_path / "store"
    for bad in ("0", "-2"):
        assert main(["grid", "demo", "--batch-size", bad, "--store", str(store)]) == 2
        err = capsys.readouterr().err
        assert err == (f"ripple grid: error: --batch-size must be a positive number of samples per engine call "
                       f"(1 = one at a time), got {bad}\n")
    with pytest.raises(SystemExit) as exc:
        main(["grid", "demo", "--batch-size", "x"])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1
    assert not store.exists()


def test_settings_added_later_keep_earlier_cell_ids():
    """A cell at eos_early_stop off, block_align response, the task's own options, and confidence steps 0, k 1, edit_tau 1.0 and max_post_steps 0 hashes as
    before those settings existed, so stores written before them resume; turning one on makes a new cell."""
    import hashlib

    import yaml

    from ripple.errors import RippleError
    from ripple.platform.experiments.store import dumps

    spec = parse_spec(yaml.safe_load(GOOD.replace("[default]", "[confidence]")), "t")
    cell = spec.cells[0]
    before = {k: v for k, v in cell.settings.items()
              if k not in ("eos_early_stop", "chat_form", "task_options", "block_align", "sub_block_length")}
    before["params"] = {k: v for k, v in before["params"].items()  # steps, k, edit_tau, max_post_steps came later
                        if k not in ("steps", "k", "edit_tau", "max_post_steps")}
    assert cell.cell_id == hashlib.sha256(dumps(before).encode()).hexdigest()[:16]
    early = parse_spec(yaml.safe_load(GOOD.replace("[default]", "[confidence]")
                                      + "eos_early_stop: true\n"), "t").cells[0]
    stepped = parse_spec(yaml.safe_load(GOOD.replace("[default]", "[{name: confidence, params: {steps: 4}}]")), "t").cells[0]
    aligned = parse_spec(yaml.safe_load(GOOD.replace("[default]", "[confidence]") + "block_align: absolute\n"),
                         "t").cells[0]
    assert early.eos_early_stop and len({cell.cell_id, early.cell_id, stepped.cell_id, aligned.cell_id}) == 4
    assert aligned.block_align == "absolute" and cell.block_align == "response"
    with pytest.raises(RippleError, match="eos_early_stop"):
        parse_spec(yaml.safe_load(GOOD + "eos_early_stop: maybe\n"), "t")
    with pytest.raises(RippleError, match="'block_align' takes one of response, absolute, got 'start'"):
        parse_spec(yaml.safe_load(GOOD + "block_align: start\n"), "t")


def test_sub_block_length_is_id_neutral_unset_and_checked():
    """`sub_block_length` unset (the block length) keeps a cell's id; set, it is a cell of its own and
    reaches the engine's config; a length that does not divide a block length is one line."""
    import yaml

    from ripple.errors import RippleError

    base = GOOD.replace("[default]", "[confidence]")
    cell = parse_spec(yaml.safe_load(base), "t").cells[0]
    sub = parse_spec(yaml.safe_load(base + "sub_block_length: 4\n"), "t").cells[0]
    assert cell.sub_block_length is None and sub.sub_block_length == 4
    assert "sub_block_length" not in cell.identity() and sub.identity()["sub_block_length"] == 4
    assert cell.cell_id != sub.cell_id and replace_settings(sub, sub_block_length=None).cell_id == cell.cell_id
    whole = parse_spec(yaml.safe_load(base + "sub_block_length: 16\n"), "t").cells[0]  # = the block: no sub-blocks
    assert whole.sub_block_length is None and whole.cell_id == cell.cell_id
    for bad in ("3", "0", "64", "x"):
        with pytest.raises(RippleError, match="sub_block_length") as exc:
            parse_spec(yaml.safe_load(base + f"sub_block_length: {bad}\n"), "t")
        assert "\n" not in str(exc.value)


def test_a_tasks_models_restrict_it_to_some_of_the_grids_models():
    """One grid over models trained on different tasks: a task's `models` keeps its cells to those models,
    with the task's own lengths; the other tasks run on every model."""
    import yaml

    text = GOOD.replace("[ripple-tiny]", "[ripple-tiny, ripple-tiny-lines]").replace(
        "tasks: [arith]", "tasks: {arith: {models: [ripple-tiny]}, pyfunc: {},\n"
        "        lines/copy: {models: [ripple-tiny-lines], gen_lengths: [32], block_lengths: [32]}}")
    cells = parse_spec(yaml.safe_load(text), "t").cells
    assert sorted((c.model, c.task, c.gen_length, c.block_length) for c in cells) == [
        ("ripple-tiny", "arith", 48, 16), ("ripple-tiny", "pyfunc", 48, 16), ("ripple-tiny-lines", "lines/copy", 32, 32),
        ("ripple-tiny-lines", "pyfunc", 48, 16)]


def replace_settings(cell, **changes):
    from dataclasses import replace

    return replace(cell, **changes)


def test_shipped_grids_keep_their_cell_ids():
    """Every cell of every shipped grid as of commit 8afd28c (before token editing, k and the
    ripple-tiny-bd rows) keeps its id: a new hyperparameter at its default is id-neutral."""
    import json
    from dataclasses import replace
    from pathlib import Path

    pinned = json.loads((Path(__file__).parent / "shipped_cell_ids.json").read_text())
    assert len(pinned) == 7 and sum(map(len, pinned.values())) > 100
    for name, ids in pinned.items():
        cells = load_spec(name).cells
        # `chat: true` was single-turn when these ids were pinned and is the harness's multi-turn form
        # now (test_chat_forms_have_ids_of_their_own): a chat cell's pinned id is its single-turn id
        current = {c.cell_id if not c.chat else replace(c, chat_form="singleturn").cell_id for c in cells}
        assert set(ids) <= current, name


def test_chat_forms_have_ids_of_their_own():
    """`chat: true` is lm-eval's default form (multi-turn) and gets its own cell id; `chat: singleturn`
    keeps the id `chat: true` had before the form existed (single-turn), so a store written then
    never lends its single-turn samples to a multi-turn cell; a bad value is one line, exit 2."""
    import hashlib

    import yaml

    from ripple.errors import RippleError
    from ripple.platform.experiments.store import dumps

    def cell(chat):
        return parse_spec(yaml.safe_load(GOOD + f"chat: {chat}\n"), "t").cells[0]

    multi, single, explicit, off = cell("true"), cell("singleturn"), cell("multiturn"), cell("false")
    assert (multi.chat, multi.chat_form, multi.prompt_chat) == (True, "multiturn", "multiturn")
    assert (single.prompt_chat, off.prompt_chat) == ("singleturn", False)
    assert multi.cell_id == explicit.cell_id and len({multi.cell_id, single.cell_id, off.cell_id}) == 3
    # single-turn hashes as `chat: true` did before the form existed (the pinned llada2 ids check it on a
    # real grid: test_shipped_grids_keep_their_cell_ids); multi-turn hashes its form
    assert single.identity()["chat"] is True and "chat_form" not in single.identity()
    assert multi.identity()["chat_form"] == "multiturn"
    assert single.cell_id == hashlib.sha256(dumps(single.identity()).encode()).hexdigest()[:16]
    with pytest.raises(RippleError, match="'chat' takes false, true \\(= multiturn\\), multiturn or singleturn"):
        cell("twoturn")
    # a record written before the form existed reads back as single-turn
    import polars as pl

    from ripple.platform.experiments.store import SCHEMA, _conform

    row = {c: None for c in SCHEMA if c != "chat_form"}
    assert _conform(pl.DataFrame([row], schema={c: SCHEMA[c] for c in row}))["chat_form"].to_list() == ["singleturn"]


def test_the_diffusion_gemma_grid():
    """26B-A4B-it on the four benchmarks, chat, renoise at the model card's defaults and two settings
    with fewer forwards; whole canvases of the model's 256 tokens under the encoder's cache."""
    from ripple.decoders import get

    spec = load_spec("diffusion-gemma")
    assert {c.model for c in spec.cells} == {"google/diffusiongemma-26B-A4B-it"}
    assert {c.task for c in spec.cells} == {"gsm8k", "math500", "humaneval", "mbpp"} and len(spec.cells) == 12
    assert {c.decoder for c in spec.cells} == {"renoise"} and all(c.chat for c in spec.cells)
    assert {(c.gen_length, c.block_length, c.cache) for c in spec.cells} == {(256, 256, "prefix")}
    settings = list(dict.fromkeys(dict(c.params)["steps"] for c in spec.cells))
    card = get("renoise").Params().to_dict()  # its defaults: the model's generation_config.json
    assert card == {"steps": 48, "t_max": 0.8, "t_min": 0.4, "entropy_bound": 0.1, "stability": 1, "confidence": 0.005}
    assert dict(spec.cells[0].params) == card and settings[0] == 48 and all(s < 48 for s in settings[1:])
    assert len(settings) == 3


def test_a_task_may_set_its_own_lengths():
    """`tasks: {name: {gen_lengths, block_lengths}}` replaces the spec's lengths for that task's cells (as
    ParallelBench runs 32-token waiting lines and 64-token puzzles); ids are the cells' usual ones."""
    base = {"models": ["ripple-tiny"], "gen_lengths": [48], "block_lengths": [16], "decoders": ["default"]}
    spec = parse_spec({**base, "tasks": {"arith": {}, "pyfunc": {"gen_lengths": [64, 32], "block_lengths": [32]}}}, "t")
    assert sorted((c.task, c.gen_length, c.block_length) for c in spec.cells) == [
        ("arith", 48, 16), ("pyfunc", 32, 32), ("pyfunc", 64, 32)]
    plain = parse_spec({**base, "tasks": ["arith"]}, "t")
    assert spec.cells[0].cell_id == plain.cells[0].cell_id and spec.cells[0].task_options == "{}"
    with pytest.raises(RippleError, match="gen_length 48 is not divisible by block_length 32"):
        parse_spec({**base, "tasks": {"arith": {"block_lengths": [32]}}}, "t")
    with pytest.raises(RippleError, match="tasks.arith.gen_lengths"):
        parse_spec({**base, "tasks": {"arith": {"gen_lengths": [0]}}}, "t")


def test_a_decoder_entry_may_set_its_own_caches_and_block_lengths():
    """A decoder entry's `caches` and `block_lengths` replace the grid's for its cells only (APD runs under its own
    cache policy as one block beside decoders of blocks and block caches); each checked like the grid's."""
    base = {"models": ["ripple-tiny"], "tasks": ["arith"], "gen_lengths": [48], "block_lengths": [16]}
    spec = parse_spec({**base, "decoders": ["default", {"name": "confidence", "caches": ["prefix", "dual"],
                                                         "block_lengths": [48, 8]}]}, "t")
    assert sorted((c.decoder, c.block_length, c.cache) for c in spec.cells) == [
        ("confidence", 8, "dual"), ("confidence", 8, "prefix"), ("confidence", 48, "dual"), ("confidence", 48, "prefix"),
        ("default", 16, "none")]
    plain = parse_spec({**base, "decoders": ["default"]}, "t")
    assert [c.cell_id for c in spec.cells if c.decoder == "default"] == [c.cell_id for c in plain.cells]
    with pytest.raises(RippleError, match=r"decoder 'default' does not support cache 'sliding'; supported: none, "
                                          r"prefix, dual$"):
        parse_spec({**base, "decoders": [{"name": "default", "caches": ["sliding"]}]}, "t")
    with pytest.raises(RippleError, match="unknown cache policy 'paged'; accepted: none, prefix, dual, sliding$"):
        parse_spec({**base, "decoders": [{"name": "default", "caches": ["paged"]}]}, "t")
    with pytest.raises(RippleError, match="gen_length 48 is not divisible by block_length 32"):
        parse_spec({**base, "decoders": [{"name": "default", "block_lengths": [32]}]}, "t")
    with pytest.raises(RippleError, match="decoders.default.block_lengths"):
        parse_spec({**base, "decoders": [{"name": "default", "block_lengths": [0]}]}, "t")


def test_the_parallelbench_grid_plans_its_sweep(capsys):
    """ParallelBench's published sweep (needs the `topk` decoder): 12 tasks x 2 models; top-k at
    k = 1..32 for every ranking with steps = gen_length / k and the block equal to the response."""
    assert main(["grid", "parallelbench", "--dry-run"]) == 0
    assert "experiment parallelbench, 1152 cells" in capsys.readouterr().out
    cells = load_spec("parallelbench").cells
    from ripple.tasks.parallelbench import PUZZLE, WAITING_LINE

    # the 12 listed tasks (categories found in a data directory, e.g. waiting_line_n15, are not in the spec)
    assert {c.task for c in cells} == ({f"parallelbench/waiting_line/{t}" for t in WAITING_LINE}
                                       | {f"parallelbench/puzzle/{t}" for t in PUZZLE})
    assert all(c.block_length == c.gen_length == (64 if "/puzzle/" in c.task else 32) for c in cells)
    topk = [dict(c.params) for c in cells if c.decoder == "topk" and c.model == "GSAI-ML/LLaDA-1.5"
            and c.task == "parallelbench/puzzle/sudoku_n4_12"]
    k = sorted({(p["rank"], 64 // p["steps"]) for p in topk if p["tau"] == 0 and p["factor"] == 0})
    assert k == [(r, n) for r in ("confidence", "entropy", "margin", "random") for n in (1, 2, 4, 8, 16, 32)]
    assert sorted(p["tau"] for p in topk if p["tau"] > 0) == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert sorted(p["factor"] for p in topk if p["factor"] > 0) == [0.7, 1.0, 1.3, 1.6, 1.9]
