"""ParallelBench's programmatically scored tasks, `parallelbench/<category>/<task>`, from the user's copy.

ParallelBench (Kang et al., ICLR 2026; github.com/furiosa-ai/ParallelBench) has no licence, so Ripple
ships none of its files: it reads the test folder the user links or copies to
`DATA_DIR/parallelbench/<category>/` (ParallelBench's `dataset/parallel_bench/data/output/test/<category>/`
as it is: `task_config.yaml` and one `<task>.jsonl` per task) and rebuilds prompts and scores from their
documented behaviour:
- a task's `prompt` template (task_config.yaml, key `<category>/<task>`) is formatted with the row's
  `input` fields and every literal backslash-n becomes a newline;
- each of the row's `input.icl_examples` is a user turn (the template formatted with its input) and an
  assistant turn (its `answer`, or the answer's `example` when the answer is a record); the test question
  is the last user turn. ParallelBench always sends these turns through the chat template, which is
  `--chat multiturn` here (`Example.shots` and `Example.question`);
- Ripple's plain prompt (no chat template) writes each in-context example as "user\\nassistant\\n\\n" and
  ends with the question and a newline, so the answer follows as in the examples;
- the completion (up to the model's end of sequence, special tokens dropped; no stop sequence) is scored
  by the task's metric (`parallelbench_scoring`) against the row's `answer`: `score` and `score_strict`
  in `Score.details`, `Score.correct` when score is 1.

The 12 tasks are always listed; any other `waiting_line*` or `puzzle*` category found in the data
(ParallelBench's `waiting_line_n15`) gives the same tasks at its length. The five text-writing tasks
need LanguageTool and BERTScore downloads and are refused in one line.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

from ripple.errors import RippleError
from ripple.tasks.base import Example, Score, TaskFamily, register_task, register_task_family, registered_task
from ripple.tasks.benchmark import BenchmarkTask
from ripple.tasks.data import DATA_DIR_ENV, data_dir, read_jsonl
from ripple.tasks.parallelbench_scoring import METRICS, score_completion

PREFIX = "parallelbench"
REPO = "github.com/furiosa-ai/ParallelBench"
TEST_FOLDER = "dataset/parallel_bench/data/output/test"
# the programmatically scored tasks per kind of category, with ParallelBench's response length
WAITING_LINE = ("copy", "insert_index", "insert_random", "remove_index", "remove_random", "replace_index",
                "replace_random", "reverse", "shuffle", "sort")
PUZZLE = ("latin_square_n4", "sudoku_n4_12")
KINDS: dict[str, tuple[tuple[str, ...], int]] = {"waiting_line": (WAITING_LINE, 32), "puzzle": (PUZZLE, 64)}
LISTED = ("waiting_line", "puzzle")  # categories listed even without data
# text-writing categories: scored with LanguageTool (Java) and BERTScore (a model), which Ripple does not provide
TEXT_WRITING = ("paraphrase_summarize", "words_to_sentence", "text_writing")
WRONG = "I cannot answer that."  # a completion every metric scores 0
# each task's metric in ParallelBench's task_config.yaml (the data's config is what scores; this is listed)
METRIC_OF = {**dict.fromkeys(("copy", "insert_index", "remove_index", "replace_index", "reverse", "sort"),
                             "list_match_score"),
             "insert_random": "list_random_insert_score", "remove_random": "list_random_remove_score",
             "replace_random": "list_random_replace_score", "shuffle": "list_shuffle_score",
             "latin_square_n4": "latin_square_score", "sudoku_n4_12": "sudoku_score"}


def _kind(category: str) -> str | None:
    return next((k for k in KINDS if category.startswith(k)), None)


def template_text(template: str, fields: dict[str, Any]) -> str:
    """A prompt as ParallelBench builds it: `str.format` with the fields, then literal \\n -> newline."""
    return template.format(**fields).replace("\\n", "\n")


def shown_answer(answer: Any) -> str:
    """What an in-context example's assistant turn (and the gold completion) shows for an answer."""
    return answer if isinstance(answer, str) else answer["example"]


class ParallelBenchTask(BenchmarkTask):
    """One ParallelBench task of one category; subclasses (one per name) set `category` and `task`."""

    category: ClassVar[str]
    task: ClassVar[str]
    stop_sequences = ()  # the model's end of sequence only
    parallelbench_scored = True
    data_source: ClassVar[str] = f"ParallelBench test files (user's copy in DATA_DIR/{PREFIX}/; {REPO})"

    def _folder(self) -> Path:
        root = data_dir(self.data_dir)
        where = f"link or copy ParallelBench's {TEST_FOLDER}/{self.category}/ folder ({REPO})"
        if root is None:
            raise RippleError(f"task {self.name} reads ParallelBench's test files from a data directory: pass "
                              f"--data-dir DIR or set {DATA_DIR_ENV}, and {where} to DIR/{PREFIX}/{self.category}/")
        folder = root / PREFIX / self.category
        if not folder.is_dir():
            raise RippleError(f"task {self.name}: folder {folder} not found; {where} there")
        return folder

    def data_found(self) -> bool:
        root = data_dir(self.data_dir)
        return root is not None and (root / PREFIX / self.category / f"{self.task}.jsonl").is_file()

    def _config(self, folder: Path) -> tuple[str, str]:
        """(prompt template, metric) of this task from the category's task_config.yaml."""
        import yaml

        path = folder / "task_config.yaml"
        if not path.is_file():
            raise RippleError(f"task {self.name}: {path} not found; it comes with ParallelBench's "
                              f"{TEST_FOLDER}/{self.category}/ folder ({REPO})")
        try:
            configs = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise RippleError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
        key = f"{self.category}/{self.task}"
        config = configs.get(key) if isinstance(configs, dict) else None
        if not isinstance(config, dict) or not isinstance(config.get("prompt"), str):
            raise RippleError(f"{path} has no entry {key!r} with a prompt template")
        metric = config.get("metric")
        if metric not in METRICS:
            raise RippleError(f"{path}: {key} has metric {metric!r}; accepted: {', '.join(METRICS)}")
        return config["prompt"], metric

    def build(self) -> list[Example]:
        folder = self._folder()
        template, metric = self._config(folder)
        path = folder / f"{self.task}.jsonl"
        if not path.is_file():
            raise RippleError(f"task {self.name}: {path} not found; it comes with ParallelBench's "
                              f"{TEST_FOLDER}/{self.category}/ folder ({REPO})")
        return [self._example(row, i, template, metric, path) for i, row in enumerate(read_jsonl(path))]

    def _example(self, row: dict, index: int, template: str, metric: str, path: Path) -> Example:
        try:
            fields, label = row["input"], row["answer"]
            question = template_text(template, fields)
            shots = tuple((template_text(template, shot["input"]), shown_answer(shot["answer"]))
                          for shot in fields.get("icl_examples", ()))
            reference = shown_answer(label)
        except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
            raise RippleError(f"{path} line {index + 1} is not a ParallelBench row (input, answer and the "
                              f"template's fields): {type(exc).__name__}: {exc}") from None
        prompt = "".join(f"{user}\n{assistant}\n\n" for user, assistant in shots) + question + "\n"
        return Example(id=f"{self.name}/{index}", prompt=prompt, reference=reference,
                       answer=json.dumps({"metric": metric, "label": label}), shots=shots, question=question)

    def score(self, example: Example, completion: str) -> Score:
        gold = json.loads(example.answer)
        details = score_completion(gold["metric"], completion, gold["label"])
        return Score(correct=details["score"] == 1, details=details)

    def wrong_completion(self, example: Example) -> str:
        return WRONG


def task_class_for(category: str, task: str) -> type[ParallelBenchTask]:
    """The registered class of `parallelbench/<category>/<task>` (made and registered on first use)."""
    name = f"{PREFIX}/{category}/{task}"
    known = registered_task(name)
    if known is not None:
        return known  # type: ignore[return-value]
    doc = f"ParallelBench {category}/{task}: {KINDS[_kind(category)][1]}-token response, scored as ParallelBench does."
    cls = type(f"ParallelBench_{category}_{task}", (ParallelBenchTask,),
               {"name": name, "category": category, "task": task, "metric": METRIC_OF[task], "gen_length": KINDS[_kind(category)][1],
                "__doc__": doc, "__module__": __name__})
    return register_task(cls)


def resolve(name: str) -> type[ParallelBenchTask] | None:
    """A `parallelbench/...` name's class; one line for the text-writing tasks and unknown names."""
    parts = name.split("/")
    if parts[0] != PREFIX:
        return None
    programmatic = ", ".join(f"{PREFIX}/{c}/{t}" for c in LISTED for t in KINDS[c][0])
    if len(parts) == 3 and parts[1] in TEXT_WRITING:
        raise RippleError(f"task {name} is one of ParallelBench's text-writing tasks, scored with LanguageTool "
                          f"(Java, downloaded at first use) and BERTScore (a model download); Ripple does not "
                          f"provide them. Programmatic tasks: {programmatic}")
    kind = _kind(parts[1]) if len(parts) == 3 else None
    if kind is None or parts[2] not in KINDS[kind][0]:
        raise RippleError(f"unknown ParallelBench task {name!r}; accepted: {programmatic}, and the same tasks "
                          f"of any waiting_line* or puzzle* category in DATA_DIR/{PREFIX}/")
    return task_class_for(parts[1], parts[2])


def found() -> list[str]:
    """Names of the tasks of every waiting_line* and puzzle* category in $RIPPLE_DATA_DIR/parallelbench/."""
    root = os.environ.get(DATA_DIR_ENV)
    folder = Path(root).expanduser() / PREFIX if root else None
    if folder is None or not folder.is_dir():
        return []
    return [f"{PREFIX}/{c.name}/{t}" for c in sorted(folder.iterdir()) if c.is_dir() and _kind(c.name)
            for t in KINDS[_kind(c.name)][0]]


for _category in LISTED:
    for _task in KINDS[_category][0]:
        task_class_for(_category, _task)
register_task_family(TaskFamily(resolve, found))
