"""Ripple as an lm-evaluation-harness model: the harness drives Ripple's engine and decoders and
agrees with `ripple eval` problem by problem; loglikelihood is LLaDA's Monte-Carlo estimator."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from ripple.decoders import build, decoders_for
from ripple.platform.experiments.evaluate import evaluate_cell
from ripple.platform.experiments.harness import RippleLM, draw_masks, mc_loglikelihood, task_configs
from ripple.platform.runtime.engine import GenerationConfig
from ripple.platform.runtime.loading import load_model
from ripple.tasks import get_task
from tests.decoders.test_invariants import FILTERS
from tests.harness_tools import HARNESS_TASKS, METRICS, harness_env

SETTINGS = {"gen_length": 16, "block_length": 8, "cache": "dual"}
PASSED = {"gsm8k": ("strict-match", "exact_match"), "minerva_math500": ("none", "math_verify"),
          "humaneval": ("create_test", "pass@1"), "mbpp": ("none", "pass_at_1")}


@pytest.fixture(scope="module")
def include(shared, tmp_path_factory):
    return str(task_configs(shared / "data", tmp_path_factory.mktemp("include")))


def _evaluate(lm, tasks, include, limit, **kwargs):
    """The harness's own `simple_evaluate`, samples logged: on task objects (the session's, built from
    Ripple's local task YAMLs) or task names found in `include`."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    with harness_env():
        manager = TaskManager(include_path=include, include_defaults=False)  # never index every packaged task
        return simple_evaluate(model=lm, tasks=tasks, limit=limit, log_samples=True, confirm_run_unsafe_code=True,
                               task_manager=manager, **kwargs)


@pytest.fixture(scope="module")
def tiny():
    return load_model("ripple-tiny")


@pytest.mark.slow
def test_the_harness_and_ripple_eval_agree_problem_by_problem(harness_task_objects, include, tiny, shared):
    args = "pretrained=ripple-tiny,decoder=confidence,tau=0.5," + ",".join(f"{k}={v}" for k, v in SETTINGS.items())
    counts = {"gsm8k": 1, "minerva_math500": 1, "humaneval": 2, "mbpp": 1}
    out = _evaluate("ripple", [harness_task_objects[name] for name in counts], include, None, model_args=args,
                    samples={name: list(range(n)) for name, n in counts.items()})
    decoder, config = build("confidence", {"tau": "0.5"}), GenerationConfig(**SETTINGS)
    compared = 0
    for name, n in counts.items():
        key, metric = PASSED[name]
        samples = sorted((s for s in out["samples"][name] if s["filter"] == key), key=lambda s: s["doc_id"])
        task = get_task(HARNESS_TASKS[name], data_dir=shared / "data")
        cell = evaluate_cell(tiny, task, decoder, config, limit=n, progress=False)
        assert len(samples) == len(cell.samples) == n
        for sample, ours, ex in zip(samples, cell.samples, task.examples("test", n)):
            context, kwargs = sample["arguments"][0]
            assert context == ex.prompt
            assert sample["resps"][0][0] == ours.completion, (name, ex.id)
            assert (sample[metric] == 1) == ours.correct, (name, ex.id)
            assert kwargs["ripple"]["nfe"] == ours.nfe and kwargs["ripple"]["generated_tokens"] == ours.generated_tokens
            compared += 1
    assert compared == 5


@pytest.mark.slow
def test_every_decoder_runs_through_the_harness_with_nfe_and_tpf_logged(harness_task_objects, include):
    for name in decoders_for("mask", "none"):
        data = {"filter": FILTERS[8]} if name == "learn2pd" else {}  # a learned decoder reads its filter
        lm = RippleLM(pretrained="ripple-tiny", decoder=name, gen_length=8, block_length=8, cache="none", **data)
        out = _evaluate(lm, [harness_task_objects["humaneval"]], include, 1)
        (sample,) = out["samples"]["humaneval"]
        stats = sample["arguments"][0][1]["ripple"]
        assert stats["nfe"] >= 1 and stats["tpf"] == stats["generated_tokens"] / stats["nfe"], name
        (line,) = lm.summary()
        assert line.startswith(f"ripple | humaneval | {name} ") and "mean NFE" in line and "TPF" in line, line


def _cli(*args):
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_ALLOW_CODE_EVAL": "1"}
    # run where evaluate.load("code_eval") finds HF's real script by path (harness_tools)
    return subprocess.run([sys.executable, "-m", "ripple.cli", "lm-eval", *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd=METRICS)


@pytest.mark.slow
def test_ripple_lm_eval_forwards_the_harness_cli_and_prints_nfe_and_tpf(shared, tmp_path):
    proc = _cli("--model", "ripple", "--model_args", "pretrained=ripple-tiny,decoder=rps,gen_length=8,block_length=8",
                "--tasks", "humaneval", "--limit", "1", "--data-dir", str(shared / "data"), "--confirm_run_unsafe_code",
                "--log_samples", "--output_path", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "|humaneval|" in proc.stdout.replace(" ", "")  # the harness's table
    summary = [line for line in proc.stdout.splitlines() if line.startswith("ripple | humaneval | rps")]
    assert len(summary) == 1 and "mean NFE" in summary[0] and "TPF" in summary[0]
    (logged,) = list(tmp_path.rglob("samples_humaneval_*.jsonl"))
    record = json.loads(logged.read_text().splitlines()[0])
    assert record["arguments"]["gen_args_0"]["arg_1"]["ripple"]["nfe"] >= 1


@pytest.mark.parametrize("model_args,message", [
    ("pretrained=ripple-tiny,decoder=nope", "unknown decoder 'nope'"),
    ("pretrained=ripple-tiny,decoder=rps,tau=7", "tau"),
    ("pretrained=ripple-tiny,decoder=rps,gen_lenght=8", "unknown model_args key 'gen_lenght'"),
    ("pretrained=ripple-tiny,gen_length=10,block_length=4", "not divisible by block_length"),
    ("pretrained=ripple-tiny,decoder=default,cache=dual,batch_size=0", "batch_size"),
    ("pretrained=ripple-tiny,mc_num=10,mc_batch=4", "mc_num"),
    ("pretrained=/no/such/model", "not found"),
])
def test_bad_model_args_are_one_clear_error(model_args, message):
    """What the harness calls with `--model_args` (and its CLI's extra settings)."""
    from ripple.errors import RippleError

    with pytest.raises(RippleError) as info:
        RippleLM.create_from_arg_string(model_args, {"batch_size": None, "max_batch_size": None, "device": None})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_model_args_through_the_cli_are_one_line_and_exit_2():
    proc = _cli("--model", "ripple", "--model_args", "pretrained=ripple-tiny,decoder=rps,tau=7", "--tasks", "humaneval",
                "--limit", "1", "--confirm_run_unsafe_code")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ripple lm-eval: error:")]
    assert proc.returncode == 2 and len(lines) == 1 and "tau" in lines[0], proc.stderr[-1500:]
    assert "Traceback" not in proc.stderr


def test_a_model_without_tokenizer_is_refused_before_its_weights_load(golden, monkeypatch):
    """The harness sends text: a checkpoint without tokenizer files is one line, and costs no load."""
    from ripple.errors import RippleError

    def forbidden(*args, **kwargs):
        raise AssertionError("the weights loaded before the model was refused")

    monkeypatch.setattr("ripple.platform.runtime.loading.load_model", forbidden)
    with pytest.raises(RippleError) as info:
        RippleLM(pretrained=str(golden / "llada-tiny"), decoder="default", gen_length=8, block_length=8)
    assert str(info.value) == f"model '{golden / 'llada-tiny'}' has no tokenizer; the harness sends text"


def test_loglikelihood_rolling_is_refused_in_one_line():
    from ripple.errors import RippleError

    lm = RippleLM(pretrained="ripple-tiny")
    with pytest.raises(RippleError, match="loglikelihood_rolling"):
        lm.loglikelihood_rolling([])


# ---------------------------------------------------------------------------- loglikelihood
def _direct(model, prefix, target, mask_id, mc_num, mc_batch, seed):
    """The estimator written out draw by draw, row by row, in float64."""
    generator = torch.Generator().manual_seed(seed)
    seq = torch.tensor(prefix + target)
    total = 0.0
    for _ in range(mc_num // mc_batch):
        masks = draw_masks(len(target), mc_batch, generator)
        for row in masks:
            noisy = seq.clone()
            noisy[len(prefix):][row] = mask_id
            logits = model(noisy[None], torch.arange(len(seq))[None]).logits[0].double()  # [L, V]
            logp = F.log_softmax(logits, dim=-1)
            picked = [logp[len(prefix) + j, target[j]].item() for j in range(len(target)) if row[j]]
            total += -sum(picked) / (row.sum().item() / len(target))
    return -total / mc_num


def test_the_estimator_equals_a_direct_computation_on_the_golden_llada(golden):
    lm = load_model(str(golden / "llada-tiny"))
    expected = load_file(str(golden / "llada-tiny" / "expected.safetensors"))
    prompt = expected["input_ids"][0].tolist()
    prefix, target = prompt[:24], [5, 17, 42, 99, 7, 3, 120, 64, 8, 15, 77, 31, 2, 140, 11, 60]
    with torch.inference_mode():
        for mc_num, mc_batch, seed in ((16, 16, 0), (12, 4, 7)):
            ours = mc_loglikelihood(lm.model, prefix, target, mask_id=lm.mask_id, mc_num=mc_num, mc_batch=mc_batch,
                                    generator=torch.Generator().manual_seed(seed))
            assert math.isfinite(ours) and ours < 0
            assert abs(ours - _direct(lm.model, prefix, target, lm.mask_id, mc_num, mc_batch, seed)) < 1e-5
        # 16 rows over 16 positions mask every count once: one row is the golden input itself
        masks = draw_masks(16, 16, torch.Generator().manual_seed(0))
        assert sorted(masks.sum(dim=1).tolist()) == list(range(1, 17))
        full = torch.tensor(prefix + [lm.mask_id] * 16)
        assert full.tolist() == prompt
        logits = lm.model(full[None], torch.arange(40)[None]).logits[0]
        assert torch.allclose(logits, expected["logits"][0], atol=1e-4)


def test_a_multiple_choice_task_on_local_data_runs_through_loglikelihood(tmp_path, tiny):
    docs = [{"question": "What is 2+3?", "choices": ["5", "6", "7"], "label": 0},
            {"question": "What is 4+4?", "choices": ["9", "8"], "label": 1}]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "ripple_mc.yaml").write_text(
        "task: ripple_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {json.dumps(str(tmp_path / 'mc.jsonl'))}\ntest_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: \"Question: {{question}}\\nAnswer:\"\ndoc_to_choice: \"{{choices}}\"\ndoc_to_target: label\n"
        "metric_list:\n  - metric: acc\n")
    lm = RippleLM(pretrained="ripple-tiny", mc_num=4, mc_batch=2, seed=3)
    out = _evaluate(lm, ["ripple_mc"], str(tmp_path), None)
    assert out["results"]["ripple_mc"]["acc,none"] in (0.0, 0.5, 1.0)
    for sample in out["samples"]["ripple_mc"]:
        doc = docs[sample["doc_id"]]
        assert len(sample["resps"]) == len(doc["choices"])
        for (context, continuation), resp in zip(sample["arguments"], sample["resps"]):
            prefix, target = lm._encode_pair(context, continuation)
            direct = mc_loglikelihood(tiny.model, prefix, target, mask_id=tiny.mask_id, mc_num=4, mc_batch=2,
                                      generator=torch.Generator().manual_seed(3))
            assert resp[0][0] == pytest.approx(direct, abs=1e-5) and resp[0][1] is False
