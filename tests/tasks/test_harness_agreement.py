"""Ripple's four benchmarks against lm-evaluation-harness itself (the pinned release, on
../shared/data): every prompt character for character, both chat forms, and the scores of gold,
wrong and malformed completions under the harness's own filters and metrics."""
import pytest
from transformers import AutoTokenizer

from ripple.platform.runtime.loading import EMBEDDED
from ripple.tasks import get_task
from ripple.tasks.prompting import chat_messages, chat_text
from tests.harness_tools import HARNESS_TASKS, harness_scores, hf_chat_template, prompts

# A chat template in the usual shape (the model's own goes through the same code).
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SIZES = {"gsm8k": 1319, "minerva_math500": 500, "humaneval": 164, "mbpp": 500}


@pytest.fixture(scope="module")
def ripple_examples(shared):
    return {name: get_task(ours, data_dir=shared / "data").examples() for name, ours in HARNESS_TASKS.items()}


@pytest.fixture(scope="module")
def tokenizer():
    """ripple-tiny's tokenizer with `TEMPLATE` (no test changes it)."""
    tokenizer = AutoTokenizer.from_pretrained(str(EMBEDDED["ripple-tiny"]))
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def test_the_harness_is_the_pinned_release():
    from importlib.metadata import version

    assert version("lm_eval") == "0.4.13"


@pytest.mark.parametrize("name", list(HARNESS_TASKS))
def test_every_prompt_equals_the_harness(name, harness_tasks, ripple_examples):
    _, theirs = harness_tasks[name]
    ours = [ex.prompt for ex in ripple_examples[name]]
    assert len(theirs) == len(ours) == SIZES[name]
    different = [i for i, text in enumerate(ours) if theirs[i] != text]
    assert different == [], f"{len(different)}/{len(ours)} differ, first doc {different[:1]}"


@pytest.mark.parametrize("form", ["multiturn", "singleturn"])
@pytest.mark.parametrize("name", list(HARNESS_TASKS))
def test_both_chat_forms_equal_the_harness(name, form, harness_tasks, ripple_examples, tokenizer):
    task, _ = harness_tasks[name]
    every = task._instances  # the session's plain requests, put back for the scoring tests (no rebuild)
    try:
        theirs = prompts(task, limit=12, apply_chat_template=True, fewshot_as_multiturn=form == "multiturn",
                         chat_template=hf_chat_template(tokenizer))
    finally:
        task._instances = every
    ours = [chat_text(tokenizer, chat_messages(ex, form)) for ex in ripple_examples[name][:12]]
    assert [theirs[i] for i in range(12)] == ours
    turns = ours[0].count("<|user|>")
    assert turns == (1 if form == "singleturn" or name == "humaneval" else {"gsm8k": 6, "minerva_math500": 5,
                                                                            "mbpp": 4}[name])


# ---------------------------------------------------------------------------- scoring
def _gsm8k_cases(task, ex):
    return {"gold": task.gold_completion(ex), "wrong": task.wrong_completion(ex),
            "no marker": f" So the answer is {ex.answer}.", "empty": "", "commas": f" ####{ex.answer}",
            "dollars": f" The total is ${ex.answer}.\n#### ${ex.answer}"}


def test_gsm8k_scores_equal_the_harness_on_every_problem(harness_tasks, ripple_examples, shared):
    ours_task = get_task("gsm8k", data_dir=shared / "data")
    task, _ = harness_tasks["gsm8k"]
    examples = ripple_examples["gsm8k"]
    cases = [_gsm8k_cases(ours_task, ex) for ex in examples]
    seen = {"strict": set(), "flexible": set()}
    for kind in cases[0]:  # gold and wrong on every problem, the malformed ones on every 10th
        picked = range(len(examples)) if kind in ("gold", "wrong") else range(0, len(examples), 10)
        theirs = harness_scores(task, {i: cases[i][kind] for i in picked})
        for i in picked:
            ex = examples[i]
            details = ours_task.score(ex, cases[i][kind]).details
            strict = theirs[i]["strict-match"]["exact_match"] == 1.0
            flexible = theirs[i]["flexible-extract"]["exact_match"] == 1.0
            assert (details["strict_match"], details["flexible_match"]) == (strict, flexible), (kind, i)
            seen["strict"].add(strict)
            seen["flexible"].add(flexible)
    assert seen == {"strict": {True, False}, "flexible": {True, False}}  # the cases tell right from wrong


def test_math500_scores_equal_the_harness_math_verify(harness_tasks, ripple_examples, shared):
    ours_task = get_task("math500", data_dir=shared / "data")
    task, _ = harness_tasks["minerva_math500"]
    picked = list(range(0, 500, 20))
    for kind in ("gold", "wrong", "malformed", "answer only"):
        completions = {}
        for i in picked:
            ex = ripple_examples["minerva_math500"][i]
            completions[i] = {"gold": ours_task.gold_completion(ex), "wrong": ours_task.wrong_completion(ex),
                              "malformed": " The answer is $\\frac{1}{", "answer only":
                              f" Final Answer: The final answer is ${ex.answer}$. I hope it is correct."}[kind]
        theirs = harness_scores(task, completions)
        for i in picked:
            ex = ripple_examples["minerva_math500"][i]
            ours = ours_task.score(ex, completions[i]).correct
            assert ours == (theirs[i]["none"]["math_verify"] == 1), (kind, ex.id)
            if kind in ("wrong", "malformed"):
                assert not ours


def _program_cases(ours_task, ex, name):
    gold = ours_task.gold_completion(ex)
    main = "\n\nif __name__ == '__main__':\n    raise SystemExit('the main block ran')\n"
    return {"gold": gold, "wrong": ours_task.wrong_completion(ex), "syntax error": gold + "\n    return (\n",
            "main block": (gold if name == "mbpp" else gold.rstrip() + "\n") + main}


@pytest.mark.slow
@pytest.mark.parametrize("name,step", [("humaneval", 16), ("mbpp", 50)])
def test_code_scores_equal_the_harness_code_eval(name, step, harness_tasks, ripple_examples, shared):
    ours_task = get_task(HARNESS_TASKS[name], data_dir=shared / "data")
    task, _ = harness_tasks[name]
    picked = list(range(0, SIZES[name], step))
    key = {"humaneval": ("create_test", "pass@1"), "mbpp": ("none", "pass_at_1")}[name]
    outcomes = set()
    for kind in ("gold", "wrong", "syntax error", "main block"):
        completions = {i: _program_cases(ours_task, ripple_examples[name][i], name)[kind] for i in picked}
        theirs = harness_scores(task, completions)
        for i in picked:
            ex = ripple_examples[name][i]
            ours = ours_task.score(ex, completions[i]).correct
            assert ours == (theirs[i][key[0]][key[1]] == 1.0), (name, kind, ex.id)
            outcomes.add((kind, ours))
    assert {("gold", True), ("wrong", False), ("syntax error", False), ("main block", True)} <= outcomes
