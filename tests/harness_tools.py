"""lm-evaluation-harness (the pinned release) on ../shared/data, offline: its own task objects,
built once per session, and its own filters and scorers run on chosen completions."""
from __future__ import annotations

import inspect
import os
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import shared_dir

HARNESS_TASKS = {"gsm8k": "gsm8k", "minerva_math500": "math500", "humaneval": "humaneval", "mbpp": "mbpp"}
# Hugging Face evaluate's real `code_eval` (../shared/reference/README.md): the harness's
# evaluate.load("code_eval") finds it as the folder `code_eval` of the working directory
METRICS = shared_dir() / "reference"
ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_ALLOW_CODE_EVAL": "1"}


@contextmanager
def harness_env():
    """Offline, code execution allowed, and `evaluate.load("code_eval")` finding the real script by path."""
    saved, cwd = {k: os.environ.get(k) for k in ENV}, os.getcwd()
    os.environ.update(ENV)
    os.chdir(METRICS)
    try:
        yield
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_tasks(data_dir: Path, folder: Path, names=tuple(HARNESS_TASKS)) -> dict:
    """The harness's task objects for `names`, reading `data_dir` through Ripple's include YAMLs."""
    from lm_eval.tasks import TaskManager

    from ripple.platform.experiments.harness import task_configs

    with harness_env():
        manager = TaskManager(include_path=str(task_configs(data_dir, folder)), include_defaults=False)
        return manager.load(list(names))["tasks"]


def hf_chat_template(tokenizer):
    """What the harness's HF model (`lm_eval/models/huggingface.py`, `HFLM.apply_chat_template`)
    does with a conversation: the tokenizer's template, untokenised, continuing the final message
    when no generation prompt is added. (Importing that module needs `accelerate`, which the
    harness's `hf` extra brings and Ripple does not need.)"""
    def render(chat_history, add_generation_prompt=True):
        return tokenizer.apply_chat_template(chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             continue_final_message=not add_generation_prompt)
    return render


def prompts(task, limit=None, **chat) -> dict[int, str]:
    """doc id -> the context the harness sends the model (`chat`: build_all_requests' chat options),
    with the few-shot seed `simple_evaluate` sets (its default, 1234)."""
    from lm_eval.evaluator import simple_evaluate

    task.set_fewshot_seed(seed=inspect.signature(simple_evaluate).parameters["fewshot_random_seed"].default)
    task.build_all_requests(limit=limit, rank=0, world_size=1, **chat)
    return {inst.doc_id: inst.args[0] for inst in task.instances}


def harness_scores(task, completions: dict[int, str]) -> dict[int, dict[str, dict]]:
    """doc id -> filter name -> the harness's metrics for that doc's completion."""
    if set(completions) - {inst.doc_id for inst in task.instances}:  # a chat test left a shorter list
        prompts(task)
    instances = [inst for inst in task.instances if inst.doc_id in completions]
    for inst in instances:
        inst.resps, inst.filtered_resps = [completions[inst.doc_id]], {}
    with harness_env():
        for ensemble in task._filters:
            ensemble.apply(instances)
        return {inst.doc_id: {key: task.process_results(inst.doc, [value]) for key, value in inst.filtered_resps.items()}
                for inst in instances}
