"""ParallelBench tasks (ripple/tasks/parallelbench.py) on fixtures written for these tests.

tests/tasks/fixtures/parallelbench/ is laid out like ParallelBench's test folder (task_config.yaml
keyed `<category>/<task>` with a prompt template and a metric, one `<task>.jsonl` per task with
`input`, `answer` and `metadata`), but every template, name and list in it is our own."""
import json
import shutil
from pathlib import Path

import pytest

from ripple.cli import main
from ripple.errors import RippleError
from ripple.tasks import get_task, task_class, task_names
from ripple.tasks.parallelbench import WRONG
from ripple.tasks.prompting import chat_messages

FIXTURES = Path(__file__).parent / "fixtures"
TWELVE = {f"parallelbench/waiting_line/{t}" for t in ("copy", "insert_index", "insert_random", "remove_index",
                                                      "remove_random", "replace_index", "replace_random", "reverse",
                                                      "shuffle", "sort")} | {
    "parallelbench/puzzle/latin_square_n4", "parallelbench/puzzle/sudoku_n4_12"}


def task(name):
    return get_task(name, data_dir=str(FIXTURES))


def test_the_twelve_tasks_are_registered_without_data(monkeypatch):
    monkeypatch.delenv("RIPPLE_DATA_DIR", raising=False)
    assert TWELVE <= set(task_names())
    assert {n for n in task_names() if n.startswith("parallelbench/")} == TWELVE
    for name in TWELVE:
        cls = task_class(name)
        assert cls.parallelbench_scored and cls.stop_sequences == ()
        assert cls.gen_length == (64 if "/puzzle/" in name else 32)


def test_tasks_list_shows_their_source(monkeypatch, capsys):
    monkeypatch.delenv("RIPPLE_DATA_DIR", raising=False)
    assert main(["tasks", "list", "--json"]) == 0
    rows = {r["task"]: r for r in json.loads(capsys.readouterr().out)}
    assert TWELVE <= set(rows)
    assert "ParallelBench test files" in rows["parallelbench/waiting_line/copy"]["source"]
    assert rows["parallelbench/waiting_line/shuffle"]["metric"] == "list_shuffle_score"
    assert rows["parallelbench/puzzle/sudoku_n4_12"]["metric"] == "sudoku_score"


def test_messages_are_parallelbench_s():
    """Template formatted with the row's input, literal \\n made newlines; the in-context example a user
    turn and an assistant turn (a record's `example`), the question last."""
    ex = task("parallelbench/waiting_line/insert_random").examples()[0]
    shot_user = 'Queue desk.\n\n"Vera Nook" joins anywhere:\n["Ada Quill", "Bram Otter", "Cleo Marsh"]\n\nReply with the list only.'
    question = 'Queue desk.\n\n"Kit Ember" joins anywhere:\n["Dov Kettle", "Esme Brook", "Fay Lumen"]\n\nReply with the list only.'
    assert chat_messages(ex, "multiturn") == [
        {"role": "user", "content": shot_user},
        {"role": "assistant", "content": '["Ada Quill", "Vera Nook", "Bram Otter", "Cleo Marsh"]'},
        {"role": "user", "content": question}]
    assert ex.prompt == shot_user + '\n["Ada Quill", "Vera Nook", "Bram Otter", "Cleo Marsh"]\n\n' + question + "\n"
    assert ex.id == "parallelbench/waiting_line/insert_random/0"
    sudoku = task("parallelbench/puzzle/sudoku_n4_12").examples()[1]
    assert sudoku.question == "Fill the 0 cells of this 4x4 sudoku.\n\nGrid:\n4301\n0140\n3002\n1200\nSolved:\n"
    assert sudoku.shots[0][1] == "1234\n3412\n2143\n4321"  # a string answer is shown as it is


def test_every_task_scores_its_gold_and_refuses_a_wrong_answer():
    for name in sorted(TWELVE):
        t = task(name)
        examples = t.examples()
        assert len(examples) == 2, name
        for ex in examples:
            gold = t.score(ex, t.gold_completion(ex))
            assert gold.correct and gold.details == {"score": 1.0, "score_strict": 1.0}, (name, ex.id)
            wrong = t.score(ex, t.wrong_completion(ex))
            assert not wrong.correct and wrong.details == {"score": 0.0, "score_strict": 0.0}, (name, ex.id)


@pytest.mark.parametrize("name,completion,details", [
    ("parallelbench/waiting_line/copy", 'Dov Kettle, Esme Brook, Fay Lumen', (1.0, 0.0)),
    ("parallelbench/waiting_line/insert_index", '["Dov Kettle", "Esme Brook", "Kit Ember", "Fay Lumen"]', (1.0, 1.0)),
    ("parallelbench/waiting_line/insert_index", '["Kit Ember", "Dov Kettle", "Esme Brook", "Fay Lumen"]', (0.0, 0.0)),
    ("parallelbench/waiting_line/insert_random", '["Kit Ember", "Dov Kettle", "Esme Brook", "Fay Lumen"]', (1.0, 1.0)),
    ("parallelbench/waiting_line/remove_index", '["Dov Kettle", "Esme Brook"]', (1.0, 1.0)),  # index 2, 0-based
    ("parallelbench/waiting_line/remove_random", '["Esme Brook", "Fay Lumen"]', (1.0, 1.0)),
    ("parallelbench/waiting_line/replace_index", '["Dov Kettle", "Esme Brook", "Kit Ember"]', (1.0, 1.0)),
    ("parallelbench/waiting_line/replace_random", '["Kit Ember", "Esme Brook", "Fay Lumen"]', (1.0, 1.0)),
    ("parallelbench/waiting_line/reverse", '["Fay Lumen", "Esme Brook", "Dov Kettle"]', (1.0, 1.0)),
    ("parallelbench/waiting_line/shuffle", '["Dov Kettle", "Esme Brook", "Fay Lumen"]', (0.0, 0.0)),
    ("parallelbench/waiting_line/shuffle", '["Fay Lumen", "Dov Kettle", "Esme Brook"]', (1.0, 1.0)),
    # the prompt asks for surnames (Brook, Kettle, Lumen) but the label orders first names: the label wins
    ("parallelbench/waiting_line/sort", '["Dov Kettle", "Esme Brook", "Fay Lumen"]', (1.0, 1.0)),
    ("parallelbench/waiting_line/sort", '["Esme Brook", "Dov Kettle", "Fay Lumen"]', (0.0, 0.0)),
    ("parallelbench/puzzle/latin_square_n4", "3,W,A,K\nW,A,K,3\nA,K,3,W\nK,3,W,A", (1.0, 1.0)),
    ("parallelbench/puzzle/sudoku_n4_12", "2 1 4 3\n4 3 2 1\n1 2 3 4\n3 4 1 2", (1.0, 0.0)),
])
def test_scores_of_model_like_answers(name, completion, details):
    ex = task(name).examples()[0]
    s = task(name).score(ex, completion)
    assert (s.details["score"], s.details["score_strict"]) == details and s.correct == (details[0] == 1.0)


def test_another_waiting_line_category_is_found_in_the_data(monkeypatch):
    monkeypatch.setenv("RIPPLE_DATA_DIR", str(FIXTURES))
    assert "parallelbench/waiting_line_n15/copy" in task_names()
    t = get_task("parallelbench/waiting_line_n15/copy")
    assert t.gen_length == 32 and len(t.examples()) == 1
    ex = t.examples()[0]
    assert t.score(ex, t.gold_completion(ex)).correct


def test_text_writing_and_unknown_tasks_are_one_line():
    with pytest.raises(RippleError, match="text-writing tasks, scored with LanguageTool .* and BERTScore"):
        task_class("parallelbench/paraphrase_summarize/samsum")
    with pytest.raises(RippleError, match="unknown ParallelBench task 'parallelbench/waiting_line/rotate'; accepted:"):
        task_class("parallelbench/waiting_line/rotate")


def _copy(tmp_path, category="waiting_line"):
    root = tmp_path / "data"
    shutil.copytree(FIXTURES / "parallelbench" / category, root / "parallelbench" / category)
    return root


def test_missing_folder_file_and_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RippleError, match=r"folder .*empty/parallelbench/puzzle not found; link or copy "
                                          r"ParallelBench's dataset/parallel_bench/data/output/test/puzzle/"):
        get_task("parallelbench/puzzle/latin_square_n4", data_dir=str(tmp_path / "empty")).examples()
    root = _copy(tmp_path)
    (root / "parallelbench/waiting_line/sort.jsonl").unlink()
    with pytest.raises(RippleError, match=r"waiting_line/sort.jsonl not found; it comes with ParallelBench's"):
        get_task("parallelbench/waiting_line/sort", data_dir=str(root)).examples()
    (root / "parallelbench/waiting_line/task_config.yaml").unlink()
    with pytest.raises(RippleError, match=r"task_config.yaml not found"):
        get_task("parallelbench/waiting_line/copy", data_dir=str(root)).examples()


def test_no_data_directory_is_one_line(monkeypatch):
    monkeypatch.delenv("RIPPLE_DATA_DIR", raising=False)
    with pytest.raises(RippleError, match="reads ParallelBench's test files from a data directory: pass --data-dir"):
        get_task("parallelbench/waiting_line/copy").examples()


@pytest.mark.parametrize("line,problem", [
    ('{"input": {"context": "[\\"A\\"]"}, "answer": ', "is corrupt at line 3"),  # not JSON
    ('{"input": {"text": "no context field"}, "answer": "[]"}', "line 3 is not a ParallelBench row"),
    ('{"answer": "[]"}', "line 3 is not a ParallelBench row"),
])
def test_a_malformed_line_is_one_line(tmp_path, line, problem):
    root = _copy(tmp_path)
    path = root / "parallelbench/waiting_line/copy.jsonl"
    path.write_text(path.read_text() + line + "\n")
    with pytest.raises(RippleError, match=problem) as err:
        get_task("parallelbench/waiting_line/copy", data_dir=str(root)).examples()
    assert "\n" not in str(err.value)


def test_eval_with_a_missing_folder_exits_2_before_any_model_loads(tmp_path, monkeypatch, capsys):
    import ripple.platform.runtime.loading as loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model loaded before the data"))
    (tmp_path / "empty").mkdir()
    argv = ["eval", "--model", "ripple-tiny", "--task", "parallelbench/waiting_line/copy", "--decoder", "default",
            "--data-dir", str(tmp_path / "empty")]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1 and "parallelbench/waiting_line not found" in cap.err
    assert main(["eval", "--model", "ripple-tiny", "--task", "parallelbench/words_to_sentence/easy",
                 "--decoder", "default"]) == 2
    assert "LanguageTool" in capsys.readouterr().err


@pytest.mark.slow
def test_ripple_tiny_evaluates_a_parallelbench_task_with_its_strict_column(tmp_path):
    """One end-to-end eval: the task's own length (32, block = response), the strict figure in the
    JSON summary and on the text line, each sample's score details in --samples-out."""
    samples = tmp_path / "s.jsonl"
    argv = ["eval", "--model", "ripple-tiny", "--task", "parallelbench/waiting_line/copy", "--decoder", "default",
            "--data-dir", str(FIXTURES), "--limit", "1", "--samples-out", str(samples), "--json"]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    summary = json.loads(out.getvalue())
    assert (summary["gen_length"], summary["block_length"], summary["n"]) == (32, 32, 1)
    record = json.loads(samples.read_text())
    assert set(record["score"]) == {"score", "score_strict"}
    assert summary["strict"] == 100 * record["score"]["score_strict"]
    assert summary["accuracy"] == 100 * record["score"]["score"]
