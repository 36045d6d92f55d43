"""The four benchmarks prompt exactly as lm-evaluation-harness does, and score their references right.

Expected prompts are rebuilt here independently from the templates quoted in
../shared/data/EVAL_PROTOCOLS.md (parsed from that file, rendered with Jinja as the
harness does) and from the raw data files, then compared character for character.
"""
import gzip
import json
import random
import re

import jinja2
import pytest

from ripple.tasks import get_task
from ripple.tasks.math500 import fewshot_context
from ripple.tasks.verify import verify_task


@pytest.fixture(scope="module")
def data(shared):
    return shared / "data"


@pytest.fixture(scope="module")
def protocols(data):
    return (data / "EVAL_PROTOCOLS.md").read_text()


def _rows(path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _section(text, title):
    start = text.index(title)
    end = text.find("\n### ", start + len(title))
    return text[start: end if end > 0 else None]


def _quoted(section, key):
    """The double-quoted YAML string after `key: ` inside backticks, with its escapes decoded."""
    match = re.search(r"`" + re.escape(key) + r': "((?:[^"\\]|\\.)*)"`', section)
    assert match, f"{key} not found in EVAL_PROTOCOLS.md"
    return json.loads(f'"{match.group(1)}"')


def _render(template, **doc):
    return jinja2.Template(template, keep_trailing_newline=True).render(**doc)


def _defaults(protocols):
    target = re.search(r'`target_delimiter = "(.*?)"`', protocols).group(1)
    fewshot = json.loads('"' + re.search(r'`fewshot_delimiter = "(.*?)"`', protocols).group(1) + '"')
    seed = int(re.search(r"defaults to `(\d+)`", protocols).group(1))
    return target, fewshot, seed


def test_gsm8k_prompts_match_the_harness(data, protocols):
    section = _section(protocols, "### Task `gsm8k` (the default one")
    text_tmpl, target_tmpl = _quoted(section, "doc_to_text"), _quoted(section, "doc_to_target")
    shots_n = int(re.search(r"(\d+)-shot \(`num_fewshot: (\d+)`\)", section).group(2))
    target_delim, fewshot_delim, seed = _defaults(protocols)
    train, test = _rows(data / "gsm8k/train.jsonl"), _rows(data / "gsm8k/test.jsonl")
    rnd = random.Random(seed)
    expected = []
    for doc in test[:3]:
        shots = rnd.sample(train, shots_n)  # the harness's ContextSampler.sample: one draw per test doc
        context = "".join(_render(text_tmpl, **s) + target_delim + _render(target_tmpl, **s) + fewshot_delim
                          for s in shots)
        expected.append(context + _render(text_tmpl, **doc))
    got = [ex.prompt for ex in get_task("gsm8k", data_dir=data).examples("test", 3)]
    assert (shots_n, target_delim, fewshot_delim, seed) == (5, " ", "\n\n", 1234)
    assert got == expected
    assert got[0].endswith("Question: " + test[0]["question"] + "\nAnswer:")
    assert got[0].count("\n#### ") == 5 and got[0] != got[1].replace(test[1]["question"], test[0]["question"])


def test_math500_prompts_match_the_harness(data, protocols):
    section = _section(protocols, "### Task `minerva_math500`")
    expr = re.search(r"`doc_to_text` = `(.*?)`", section).group(1)
    target_delim, fewshot_delim, _ = _defaults(protocols)
    test = _rows(data / "math500/test.jsonl")
    context = fewshot_context()
    shots = context.split(fewshot_delim + "Problem:")
    assert len(shots) == 4 and context.startswith("Problem:\n") and context.endswith(fewshot_delim)
    # The four exemplars' final answers, as EVAL_PROTOCOLS.md lists them.
    for answer in ("[2,5)", "24", "16", "-\\frac{2}{3}"):
        assert f"Final Answer: The final answer is ${answer}$. I hope it is correct." in context
    assert context.count("\n\nSolution:" + target_delim) == 4
    expected = [context + eval(expr, {}, {"problem": doc["problem"]}) for doc in test[:3]]  # noqa: S307
    got = [ex.prompt for ex in get_task("math500", data_dir=data).examples("test", 3)]
    assert got == expected


def test_humaneval_prompts_are_the_dataset_prompts(data, protocols):
    section = _section(protocols, "### Task `humaneval`")
    tmpl = _quoted(section, "doc_to_text")
    test = _rows(data / "humaneval/HumanEval.jsonl")
    got = get_task("humaneval", data_dir=data).examples("test", 3)
    assert [ex.prompt for ex in got] == [_render(tmpl, **doc) for doc in test[:3]]
    stops = re.findall(r'`"(\\n\w+|\\n#)"`', section)
    assert get_task("humaneval").stop_sequences == tuple(json.loads(f'"{s}"') for s in stops)


def test_mbpp_prompts_match_the_harness(data, protocols):
    section = _section(protocols, "### Task `mbpp`")
    text_tmpl = json.loads(re.search(r'Prompt \(`doc_to_text`\).*?\n\s*`("(?:[^"\\]|\\.)*")`', section, re.S).group(1))
    target_tmpl = json.loads(re.search(r'`doc_to_target`: `("(?:[^"\\]|\\.)*")`', section).group(1))
    rows = {r["task_id"]: r for r in _rows(data / "mbpp/mbpp.jsonl")}
    shots = "".join(_render(text_tmpl, **rows[i]) + _render(target_tmpl, is_fewshot=True, **rows[i]) + "\n\n"
                    for i in (2, 3, 4))  # target_delimiter "" for mbpp
    expected = [shots + _render(text_tmpl, **rows[i]) for i in (11, 12, 13)]
    got = get_task("mbpp", data_dir=data).examples("test", 3)
    assert [ex.id for ex in got] == ["11", "12", "13"]
    assert [ex.prompt for ex in got] == expected
    assert len(get_task("mbpp", data_dir=data).examples()) == 500


@pytest.mark.parametrize("name", ["gsm8k", "math500"])
def test_verify_accepts_every_reference_and_rejects_every_wrong_answer(name, data):
    report = verify_task(get_task(name, data_dir=data), progress=False)
    assert report.n == {"gsm8k": 1319, "math500": 500}[name]
    assert (report.gold_accuracy, report.wrong_accuracy, report.gold_failures) == (100.0, 0.0, ())


@pytest.mark.slow
def test_all_humaneval_canonical_solutions_pass_in_the_sandbox(data):
    report = verify_task(get_task("humaneval", data_dir=data), progress=False, workers=2)
    assert report.n == 164
    assert (report.gold_accuracy, report.wrong_accuracy, report.gold_failures) == (100.0, 0.0, ())


@pytest.mark.slow
def test_mbpp_references_pass_except_the_item_that_needs_setup_code(data):
    report = verify_task(get_task("mbpp", data_dir=data), progress=False, workers=2)
    assert report.n == 500 and report.wrong_accuracy == 0.0
    failures = {f.id: f.reason for f in report.gold_failures}
    assert set(failures) == {"367"}, failures  # needs test_setup_code, which lm-eval does not run either
    assert "NameError" in failures["367"]


def test_a_code_reference_is_scored_through_the_sandbox(data):
    task = get_task("humaneval", data_dir=data)
    ex = task.examples("test", 1)[0]
    assert task.score(ex, ex.reference).correct
    looping = "    while True:\n        pass\n"
    score = task.score(ex, looping)
    # the CPU limit (6 s) stops a busy loop before the wall clock (10 s) unless the host is loaded
    assert not score.correct and (score.details["timed_out"] or score.details["error"] == "killed by SIGXCPU")


def _cli(*args, env_extra=None, timeout=600):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RIPPLE_DATA_DIR"}
    env.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", **(env_extra or {})})
    return subprocess.run([sys.executable, "-m", "ripple.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_offline_without_data_says_how_to_supply_it():
    proc = _cli("tasks", "verify", "gsm8k")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "openai/gsm8k" in lines[0] and "--data-dir" in lines[0] and "RIPPLE_DATA_DIR" in lines[0]


def test_missing_and_corrupt_data_are_one_line_errors(tmp_path, data):
    proc = _cli("tasks", "verify", "mbpp", "--data-dir", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "does not exist" in proc.stderr
    proc = _cli("tasks", "verify", "mbpp", "--data-dir", str(tmp_path))
    assert proc.returncode == 2 and "mbpp/mbpp.jsonl" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k/test.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n{"question": \n')
    (tmp_path / "gsm8k/train.jsonl").write_text((data / "gsm8k/train.jsonl").read_text()[:20000].rsplit("\n", 1)[0])
    proc = _cli("tasks", "verify", "gsm8k", "--data-dir", str(tmp_path), env_extra={"RIPPLE_DATA_DIR": "/nonexistent"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert "corrupt at line 2" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_data_directory_can_come_from_the_environment(data):
    proc = _cli("tasks", "verify", "gsm8k", "--limit", "20", "--json", env_extra={"RIPPLE_DATA_DIR": str(data)})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["task"] == "gsm8k" and report["n"] == 20
    assert (report["gold_accuracy"], report["wrong_accuracy"], report["gold_failures"]) == (100.0, 0.0, [])


def test_tasks_list_names_every_benchmark():
    proc = _cli("tasks", "list", "--json")
    rows = {r["task"]: r for r in json.loads(proc.stdout)}
    assert {"gsm8k", "math500", "humaneval", "mbpp", "arith", "pyfunc"} <= set(rows)
    assert rows["mbpp"]["source"] == "google-research-datasets/mbpp" and rows["humaneval"]["metric"] == "pass@1"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gsm8k", "math500", "humaneval", "mbpp"])
def test_ripple_tiny_runs_end_to_end_on_each_benchmark(name, data, tmp_path):
    samples = tmp_path / "samples.jsonl"
    proc = _cli("eval", "--model", "ripple-tiny", "--task", name, "--decoder", "confidence", "--data-dir", str(data),
                "--limit", "2", "--cache", "prefix", "--samples-out", str(samples), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["n"] == 2 and 0.0 <= summary["accuracy"] <= 100.0 and summary["mean_nfe"] >= 1
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [r["sample_id"] for r in records] == [ex.id for ex in get_task(name, data_dir=data).examples("test", 2)]
    assert all(r["prompt_tokens"] > 100 for r in records)  # the few-shot or docstring prompt really went in
