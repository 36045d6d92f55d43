"""ParallelBench's programmatic metrics, re-implemented from their documented behaviour.

ParallelBench (Kang et al., ICLR 2026; furiosa-ai/ParallelBench) has no licence, so this is
Ripple's own code that reproduces what its metric functions compute, rule for rule. Each metric
gives two figures: `score` (lenient parsing) and `score_strict` (the same rule on a completion
parsed strictly: list brackets, ", " separators and double-quoted items required). The one
entry point is `score_completion(metric, completion, label)`; `parallelbench/*` tasks and the
embedded `lines/<op>` tasks both call it, so its API and the label formats below are stable.

Labels (the jsonl `answer` field as ParallelBench writes it; `list_to_str` there writes a list
as `["A", "B"]`: double-quoted items joined by ", " inside brackets):

- `list_match_score` (copy, insert_index, remove_index, replace_index, reverse, sort): the
  target list as that text, e.g. `'["Ann Lee", "Bo Chan"]'`, or the list itself. The label is
  parsed leniently, so only its items matter.
- `list_shuffle_score` (shuffle): `{"input": [items...], "example": "<one valid answer>"}`;
  correct = same multiset as `input` and a different order.
- `list_random_insert_score` (insert_random): `{"input": [items...], "word": "New Person",
  "example": ...}`, optional `"n_words"` (default 1). `word` may be a list of words, or None
  for "any n_words new items".
- `list_random_remove_score` (remove_random): `{"input": [items...], "example": ...}`,
  optional `"n_words"` (default 1).
- `list_random_replace_score` (replace_random): `{"input": [items...], "word": "New Person",
  "example": ...}`, optional `"n_words"` (used only when `word` is None: exactly n positions
  differ).
- `latin_square_score` (latin_square_n4): `{"symbols": ["H", "T", "6", "P"], "example": ...}`,
  optional `"first_row"`. There is no strict form: `score_strict` equals `score`.
- `sudoku_score` (sudoku_n4_12): the solved 4x4 grid as text, one row of four digits a line
  (`"3412\\n1243\\n2134\\n4321"`), or the grid as a list of rows of ints.

`example` is never scored; it is the answer shown for the record in in-context examples.
A label that lacks a field its metric reads is a data error (RippleError), never a score.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ripple.errors import RippleError

_DIGIT = re.compile(r"\d")
SUDOKU_SIZE = 4  # ParallelBench's sudoku parser supports only 4x4 grids


def parse_list(text: str | list, strict: bool = False) -> list[str] | None:
    """The items of the last bracketed list in `text`; None when `strict` and the form is wrong.

    Lenient: the text after the last "[" (if any) up to the next "]" (if any), split on ",",
    items stripped of double quotes and spaces, empty items dropped (single quotes stay).
    Strict: both brackets required, items separated by exactly ", ", each wrapped in double
    quotes with no double quote inside; anything else gives None."""
    if isinstance(text, list):
        return text
    if "[" in text:
        text = text.rsplit("[", 1)[1]
    elif strict:
        return None
    if "]" in text:
        text = text.split("]", 1)[0]
    elif strict:
        return None
    if not strict:
        return [item.strip('" ') for item in text.strip("[]").split(",") if item.strip()]
    items = []
    for item in text.split(", "):
        if not (item.startswith('"') and item.endswith('"')):
            return None
        item = item[1:-1]
        if '"' in item:
            return None
        items.append(item)
    return items


def _field(label: Any, key: str, metric: str) -> Any:
    if not isinstance(label, dict) or key not in label:
        raise RippleError(f"{metric}: the label must be a record with a {key!r} field, got {label!r:.80}")
    return label[key]


def _remove_score(prediction: list[str] | None, reference: list[str] | None, n_words: int) -> float:
    """`prediction` is `reference` with exactly `n_words` distinct items taken out (order kept)."""
    if prediction is None or reference is None:
        return 0.0
    prediction, reference = list(prediction), list(reference)
    if len(prediction) != len(reference) - n_words:
        return 0.0
    missing = set(reference) - set(prediction)
    if len(missing) != n_words:
        return 0.0
    for item in missing:
        reference.remove(item)  # its first occurrence
    return float(prediction == reference)


def _insert_score(prediction: list[str] | None, reference: list[str], word: Any, n_words: int) -> float:
    """Taking the new word(s) out of `prediction` (first occurrence each) leaves `reference`."""
    if prediction is None or reference is None:
        return 0.0
    prediction = list(prediction)
    if word is None:  # any n_words new items: the reference is the prediction with them removed
        return _remove_score(reference, prediction, n_words)
    for new in ([word] if isinstance(word, str) else word):
        if new not in prediction:
            return 0.0
        prediction.remove(new)
    return float(prediction == list(reference))


def _replace_score(prediction: list[str] | None, reference: list[str], word: Any, n_words: int) -> float:
    """Same length, and `reference` with the new word at its first place in `prediction` equals it."""
    if prediction is None or reference is None:
        return 0.0
    reference = list(reference)
    if len(prediction) != len(reference):
        return 0.0
    if word is None:  # any n_words replaced
        return float(sum(p != g for p, g in zip(prediction, reference)) == n_words)
    if word not in prediction:
        return 0.0
    reference[prediction.index(word)] = word
    return float(list(prediction) == reference)


def list_match_score(completion: str, label: Any, strict: bool = False) -> float:
    """The completion's list equals the label's, item for item."""
    if not isinstance(label, (str, list)):
        raise RippleError(f"list_match_score: the label must be a list or its text, got {label!r:.80}")
    prediction = parse_list(completion, strict)
    return 0.0 if prediction is None else float(prediction == parse_list(label))


def list_shuffle_score(completion: str, label: Any, strict: bool = False) -> float:
    """The same items as the input, in a different order."""
    reference = list(_field(label, "input", "list_shuffle_score"))
    prediction = parse_list(completion, strict)
    if prediction is None:
        return 0.0
    return float(sorted(prediction) == sorted(reference) and prediction != reference)


def list_random_insert_score(completion: str, label: Any, strict: bool = False) -> float:
    """The input with the label's word inserted anywhere (or any `n_words` items when word is None)."""
    reference = _field(label, "input", "list_random_insert_score")
    word = _field(label, "word", "list_random_insert_score")
    return _insert_score(parse_list(completion, strict), reference, word, label.get("n_words", 1))


def list_random_remove_score(completion: str, label: Any, strict: bool = False) -> float:
    """The input with `n_words` (default 1) items removed, the rest in order."""
    reference = _field(label, "input", "list_random_remove_score")
    return _remove_score(parse_list(completion, strict), reference, label.get("n_words", 1))


def list_random_replace_score(completion: str, label: Any, strict: bool = False) -> float:
    """The input with one item (anywhere) replaced by the label's word."""
    reference = _field(label, "input", "list_random_replace_score")
    word = _field(label, "word", "list_random_replace_score")
    return _replace_score(parse_list(completion, strict), reference, word, label.get("n_words", 1))


def latin_square_score(completion: str, label: Any, strict: bool = False) -> float:
    """The first `size` lines whose comma-separated cells are exactly the symbols form a Latin square.

    Lines with other cells are skipped, not failed; cells are stripped. `strict` changes nothing
    (ParallelBench has no strict form for this metric)."""
    symbols = set(_field(label, "symbols", "latin_square_score"))
    first_row = label.get("first_row")
    lines = [line.strip() for line in completion.split("\n") if line.strip()]
    lines = [line for line in lines if {cell.strip() for cell in line.split(",")} == symbols]
    if len(lines) < len(symbols):
        return 0.0
    rows = [[cell.strip() for cell in line.split(",")] for line in lines[:len(symbols)]]
    columns = list(zip(*rows))  # as zip does: as long as the shortest row
    if any(set(row) != symbols for row in rows) or any(set(col) != symbols for col in columns):
        return 0.0
    if first_row is not None and rows[0] != first_row:
        return 0.0
    return 1.0


def parse_sudoku(text: str | list, strict: bool = False) -> list[list[int]] | None:
    """A 4x4 grid of ints, or None.

    Lenient: spaces and commas removed, every non-empty line with exactly four digits is a row
    (other lines skipped), and there must be exactly four such rows. Strict: exactly four
    non-empty lines, each exactly four digits."""
    if isinstance(text, list):
        return text
    text = text.strip()
    if not strict:
        lines = [line.strip() for line in text.replace(" ", "").replace(",", "").split("\n") if line.strip()]
        grid = [row for row in ([int(d) for d in _DIGIT.findall(line)] for line in lines) if len(row) == SUDOKU_SIZE]
        return grid if len(grid) == SUDOKU_SIZE else None
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if len(lines) != SUDOKU_SIZE or any(len(line) != SUDOKU_SIZE for line in lines):
        return None
    try:
        return [[int(char) for char in line] for line in lines]
    except ValueError:
        return None


def sudoku_score(completion: str, label: Any, strict: bool = False) -> float:
    """The completion's grid equals the label's solution."""
    solution = parse_sudoku(label, strict=True) if isinstance(label, (str, list)) else None
    if solution is None:
        raise RippleError(f"sudoku_score: the label must be a solved 4x4 grid, got {label!r:.80}")
    return float(parse_sudoku(completion, strict) == solution)


METRICS: dict[str, Callable[..., float]] = {
    "list_match_score": list_match_score,
    "list_shuffle_score": list_shuffle_score,
    "list_random_insert_score": list_random_insert_score,
    "list_random_remove_score": list_random_remove_score,
    "list_random_replace_score": list_random_replace_score,
    "latin_square_score": latin_square_score,
    "sudoku_score": sudoku_score,
}


def score_completion(metric: str, completion: str, label: Any) -> dict[str, float]:
    """`{"score", "score_strict"}` of `completion` under ParallelBench's `metric` for `label`.

    `label` is in the format the module docstring gives for `metric`."""
    try:
        rule = METRICS[metric]
    except KeyError:
        raise RippleError(f"unknown ParallelBench metric {metric!r}; accepted: {', '.join(METRICS)}") from None
    return {"score": rule(completion, label, strict=False), "score_strict": rule(completion, label, strict=True)}
