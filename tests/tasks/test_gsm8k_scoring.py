"""GSM8K extraction and exact match, checked against lm-eval's gsm8k behaviour."""

import json

import pytest

from ripple.tasks.gsm8k_scoring import flexible_extract, gold_answer, normalize, score_gsm8k, strict_extract

JANET = (
    "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
    "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer's market.\n#### 18"
)


@pytest.mark.parametrize("text,expected", [
    ("She has 5 + 3 = 8 apples.\n#### 8", "8"),
    ("#### 1,234", "1,234"),
    ("#### -3", "-3"),
    ("#### 42.", "42."),
    ("#### 7\n#### 9", "7"),  # the first match, not the last
    ("#### 12 apples", "12"),
    ("The total is 12.\n#### $12", "[invalid]"),  # `$` is not in the strict character class
    ("####12", "[invalid]"),  # the space after #### is required
    ("The answer is 12.", "[invalid]"),
    ("", "[invalid]"),
])
def test_strict_extract(text, expected):
    assert strict_extract(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("She makes 9 * 2 = $18 every day.", "$18"),  # the last number-like token
    ("She makes 9 * 2 = $18.", "$18."),  # adjacent punctuation is kept
    ("So 3 + 4 = 7", "7"),  # one digit: only the second alternative matches
    ("It costs $1,234.56 in total", "$1,234.56"),
    ("-5 degrees then 10", "10"),
    ("first 12, then -4", "-4"),
    ("#### 18\nThen 5 more came.", "5"),
    ("no numbers at all", "[invalid]"),
    ("...", "..."),  # lm-eval would take this too: `.` is in the first alternative's class
])
def test_flexible_extract(text, expected):
    assert flexible_extract(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("$1,000.", "1000"),
    ("1,234.56", "1234.56"),
    ("3.", "3"),
    ("3.0", "3.0"),  # exact match is textual, not numeric
    ("[INVALID]", "[invalid]"),
    ("Half the eggs\n#### 1,600", "1600"),
])
def test_normalize(text, expected):
    assert normalize(text) == expected


def test_gold_answer_reduces_a_full_solution_to_its_number():
    assert gold_answer(JANET) == "18"
    assert gold_answer("First line\nSecond: 2,000 + 125 = 2,125\n#### 2,125") == "2125"
    assert gold_answer("7") == "7"


def test_a_correct_worked_solution_matches_both_ways():
    completion = JANET.replace("<<16-3-4=9>>", "").replace("<<9*2=18>>", "")
    for gold in ("18", JANET):
        score = score_gsm8k(completion, gold)
        assert score.correct and score.details["strict_match"] and score.details["flexible_match"]
        assert score.details["strict_extracted"] == "18"


def test_dollar_signs_commas_and_trailing_periods_are_ignored():
    assert score_gsm8k("Total: $1,600.\n#### 1,600.", "1600").correct
    flexible_only = score_gsm8k("So she pays $1,600.", "#### 1,600")
    assert not flexible_only.correct
    assert flexible_only.details == {"strict_match": False, "flexible_match": True, "strict_extracted": "[invalid]",
                                     "flexible_extracted": "$1,600.", "gold": "1600"}


def test_wrong_or_missing_answers_do_not_match():
    assert not score_gsm8k("16 - 3 = 13\n#### 13", "18").correct
    assert not score_gsm8k("#### 18.00", "18").correct  # lm-eval compares strings
    assert not score_gsm8k("#### 180", "18").correct
    missing = score_gsm8k("I am not sure.", "18")
    assert not missing.details["strict_match"] and not missing.details["flexible_match"]
    assert not score_gsm8k("#### -18", "18").correct
    assert score_gsm8k("#### -18", "-18").correct


def test_the_last_number_decides_the_flexible_match():
    score = score_gsm8k("#### 18\nQuestion: Tom has 3 cats.", "18")
    assert score.details["strict_match"] and not score.details["flexible_match"]


def test_every_gsm8k_test_reference_scores_itself_correct(shared):
    rows = [json.loads(line) for line in (shared / "data" / "gsm8k" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == 1319
    for row in rows:
        number = row["answer"].split("####")[-1].strip()
        assert gold_answer(row["answer"]) == number.replace(",", "")
        assert score_gsm8k(row["answer"], row["answer"]).correct
