"""ParallelBench's seven metrics (ripple/tasks/parallelbench_scoring.py): each rule and its edge cases.

Expected values follow ParallelBench's documented behaviour: lenient parsing reads the last bracketed
list (items split on ",", double quotes and spaces stripped); strict parsing needs brackets, ", "
separators and double-quoted items; latin squares have no strict form; sudoku rows are digit lines."""
import pytest

from ripple.errors import RippleError
from ripple.tasks.parallelbench_scoring import METRICS, parse_list, parse_sudoku, score_completion

ITEMS = ["Dov Kettle", "Esme Brook", "Fay Lumen"]
TEXT = '["Dov Kettle", "Esme Brook", "Fay Lumen"]'


def both(metric, completion, label):
    s = score_completion(metric, completion, label)
    return s["score"], s["score_strict"]


@pytest.mark.parametrize("completion,expected", [
    (TEXT, (1.0, 1.0)),
    ("Here is the line: " + TEXT + " Done.", (1.0, 1.0)),  # extra text around the list
    ("['Dov Kettle', 'Esme Brook', 'Fay Lumen']", (0.0, 0.0)),  # single quotes survive lenient stripping
    ("Dov Kettle, Esme Brook, Fay Lumen", (1.0, 0.0)),  # no brackets: lenient only
    ('"Dov Kettle", "Esme Brook", "Fay Lumen"]', (1.0, 0.0)),  # one bracket missing
    ('["Dov Kettle","Esme Brook","Fay Lumen"]', (1.0, 0.0)),  # "," without the space
    ('[ "Dov Kettle", "Esme Brook", "Fay Lumen" ]', (1.0, 0.0)),  # spaces inside the brackets
    ('["Dov Kettle", "Esme Brook", Fay Lumen]', (1.0, 0.0)),  # an unquoted item
    ('["Ann Oak"] then ' + TEXT, (1.0, 1.0)),  # two lists: the last one counts
    (TEXT + ' or ["Ann Oak"]', (0.0, 0.0)),
    ('["Dov Kettle", "Esme Brook"]', (0.0, 0.0)),  # fewer items
    ('["Dov Kettle", "Esme Brook", "Fay Lumen", "Fay Lumen"]', (0.0, 0.0)),  # more (a duplicate)
    ('["Dov Kettle", "Esme Brook", "Fay Lumen",]', (1.0, 0.0)),  # trailing comma: empty item dropped leniently
    ("[]", (0.0, 0.0)),
    ("", (0.0, 0.0)),
])
def test_list_match(completion, expected):
    assert both("list_match_score", completion, TEXT) == expected
    assert both("list_match_score", completion, ITEMS) == expected  # a label may be the list itself


def test_parse_list_rules():
    assert parse_list('a [x, "y" ,  z ] b') == ["x", "y", "z"]
    assert parse_list("[a, , b,]") == ["a", "b"]  # blank items are dropped ...
    assert parse_list('[""]') == [""]  # ... before the quotes are stripped
    assert parse_list('[""]', strict=True) == [""]
    assert parse_list('["a"b"]', strict=True) is None  # a quote inside an item
    assert parse_list("[a\n, b]") == ["a\n", "b"]  # only quotes and spaces are stripped
    assert parse_list(["kept", "as is"]) == ["kept", "as is"]


SHUFFLE = {"input": ITEMS, "example": '["Esme Brook", "Fay Lumen", "Dov Kettle"]'}


@pytest.mark.parametrize("completion,expected", [
    ('["Esme Brook", "Fay Lumen", "Dov Kettle"]', (1.0, 1.0)),
    (TEXT, (0.0, 0.0)),  # a permutation equal to the input is not a shuffle
    ('["Esme Brook", "Dov Kettle"]', (0.0, 0.0)),  # fewer items
    ('["Esme Brook", "Fay Lumen", "Dov Kettle", "Dov Kettle"]', (0.0, 0.0)),  # a duplicate
    ("Esme Brook, Fay Lumen, Dov Kettle", (1.0, 0.0)),
])
def test_list_shuffle(completion, expected):
    assert both("list_shuffle_score", completion, SHUFFLE) == expected


INSERT = {"input": ITEMS, "word": "Kit Ember", "example": '["Dov Kettle", "Kit Ember", "Esme Brook", "Fay Lumen"]'}


@pytest.mark.parametrize("completion,expected", [
    ('["Kit Ember", "Dov Kettle", "Esme Brook", "Fay Lumen"]', (1.0, 1.0)),  # at the front
    ('["Dov Kettle", "Esme Brook", "Fay Lumen", "Kit Ember"]', (1.0, 1.0)),  # at the end
    (TEXT, (0.0, 0.0)),  # the new person missing
    ('["Kit Ember", "Esme Brook", "Dov Kettle", "Fay Lumen"]', (0.0, 0.0)),  # the others reordered
    ('["Kit Ember", "Dov Kettle", "Esme Brook", "Fay Lumen", "Kit Ember"]', (0.0, 0.0)),  # inserted twice
    ('["Kit Ember", "Dov Kettle", "Esme Brook"]', (0.0, 0.0)),  # someone lost
])
def test_list_random_insert(completion, expected):
    assert both("list_random_insert_score", completion, INSERT) == expected


def test_random_insert_without_a_given_word():
    label = {"input": ITEMS, "word": None, "n_words": 1}
    assert both("list_random_insert_score", '["Dov Kettle", "Zed Any", "Esme Brook", "Fay Lumen"]', label) == (1.0, 1.0)
    assert both("list_random_insert_score", '["Dov Kettle", "Esme Brook", "Fay Lumen"]', label) == (0.0, 0.0)
    two = {"input": ITEMS, "word": ["Kit Ember", "Lux Fern"], "example": ""}
    assert both("list_random_insert_score", '["Lux Fern", "Dov Kettle", "Esme Brook", "Kit Ember", "Fay Lumen"]',
                two) == (1.0, 1.0)


REMOVE = {"input": ITEMS, "example": '["Dov Kettle", "Fay Lumen"]'}


@pytest.mark.parametrize("completion,expected", [
    ('["Dov Kettle", "Fay Lumen"]', (1.0, 1.0)),
    ('["Esme Brook", "Fay Lumen"]', (1.0, 1.0)),
    ('["Fay Lumen", "Dov Kettle"]', (0.0, 0.0)),  # order changed
    (TEXT, (0.0, 0.0)),  # nobody removed
    ('["Dov Kettle"]', (0.0, 0.0)),  # two removed
    ('["Dov Kettle", "Dov Kettle"]', (0.0, 0.0)),  # right length, but two left and a duplicate
    ('["Dov Kettle", "Ann Oak"]', (0.0, 0.0)),  # a stranger
])
def test_list_random_remove(completion, expected):
    assert both("list_random_remove_score", completion, REMOVE) == expected


def test_random_remove_with_duplicates_in_the_input():
    label = {"input": ["Bo", "Al", "Bo"], "example": ""}
    assert both("list_random_remove_score", '["Al", "Bo"]', label) == (0.0, 0.0)  # no name is gone entirely
    assert both("list_random_remove_score", '["Bo", "Bo"]', label) == (1.0, 1.0)


REPLACE = {"input": ITEMS, "word": "Kit Ember", "example": '["Dov Kettle", "Kit Ember", "Fay Lumen"]'}


@pytest.mark.parametrize("completion,expected", [
    ('["Dov Kettle", "Kit Ember", "Fay Lumen"]', (1.0, 1.0)),
    ('["Kit Ember", "Esme Brook", "Fay Lumen"]', (1.0, 1.0)),
    (TEXT, (0.0, 0.0)),  # nobody replaced
    ('["Dov Kettle", "Kit Ember", "Esme Brook", "Fay Lumen"]', (0.0, 0.0)),  # inserted, not replaced
    ('["Kit Ember", "Kit Ember", "Fay Lumen"]', (0.0, 0.0)),  # two replaced
    ('["Kit Ember", "Fay Lumen", "Esme Brook"]', (0.0, 0.0)),  # the rest reordered
    ("Dov Kettle, Kit Ember, Fay Lumen", (1.0, 0.0)),
])
def test_list_random_replace(completion, expected):
    assert both("list_random_replace_score", completion, REPLACE) == expected


def test_random_replace_without_a_given_word_counts_differences():
    label = {"input": ITEMS, "word": None, "n_words": 1}
    assert both("list_random_replace_score", '["Dov Kettle", "Ann Oak", "Fay Lumen"]', label) == (1.0, 1.0)
    assert both("list_random_replace_score", '["Ann Oak", "Bo Elm", "Fay Lumen"]', label) == (0.0, 0.0)


LATIN = {"symbols": ["K", "3", "W", "A"], "example": ""}


@pytest.mark.parametrize("completion,expected", [
    ("K,3,W,A\n3,W,A,K\nW,A,K,3\nA,K,3,W", 1.0),
    ("Sure:\nK, 3, W, A\n 3 ,W,A,K\n\nW,A,K,3\nA,K,3,W\nthanks", 1.0),  # spaces and extra lines skipped
    ("K,3,W,A\n3,W,A,K\nW,A,K,3", 0.0),  # a row missing
    ("K,3,W,A\nK,3,W,A\nW,A,K,3\nA,K,3,W", 0.0),  # a column repeats
    ("K,3,W,A\n3,W,A,K\nW,A,K,3\nA,K,3,W\n3,W,A,K", 1.0),  # only the first four valid rows count
    ("K 3 W A\n3 W A K\nW A K 3\nA K 3 W", 0.0),  # no commas: no row has the symbols
    ("K,3,W,A\n3,W,A,K\nW,A,K,3,3\nA,K,3,W", 1.0),  # a row with a repeated symbol still has the symbol set
])
def test_latin_square_has_no_strict_form(completion, expected):
    assert both("latin_square_score", completion, LATIN) == (expected, expected)


def test_latin_square_first_row():
    label = {**LATIN, "first_row": ["A", "K", "3", "W"]}
    assert both("latin_square_score", "K,3,W,A\n3,W,A,K\nW,A,K,3\nA,K,3,W", label) == (0.0, 0.0)


SOLUTION = "2143\n4321\n1234\n3412"


@pytest.mark.parametrize("completion,expected", [
    (SOLUTION, (1.0, 1.0)),
    ("\n" + SOLUTION + "\n\n", (1.0, 1.0)),
    ("2 1 4 3\n4,3,2,1\n1234\n3412", (1.0, 0.0)),  # spaces and commas: lenient only
    ("Answer:\n2143\n4321\n\n1234\n3412", (1.0, 0.0)),  # a text line is skipped leniently, not strictly
    ("2143\n4321\n1234", (0.0, 0.0)),  # a row missing
    ("2143\n4321\n1234\n3412\n1234", (0.0, 0.0)),  # a fifth row
    ("21435\n4321\n1234\n3412", (0.0, 0.0)),
    ("2143\n4321\n1234\n3421", (0.0, 0.0)),  # a wrong digit
])
def test_sudoku(completion, expected):
    assert both("sudoku_score", completion, SOLUTION) == expected
    assert both("sudoku_score", completion, parse_sudoku(SOLUTION)) == expected


def test_bad_metric_and_labels_are_one_line():
    with pytest.raises(RippleError, match="unknown ParallelBench metric 'list_score'; accepted: list_match_score"):
        score_completion("list_score", "[]", [])
    with pytest.raises(RippleError, match="list_random_insert_score: the label must be a record with a 'word'"):
        score_completion("list_random_insert_score", "[]", {"input": ITEMS})
    with pytest.raises(RippleError, match="sudoku_score: the label must be a solved 4x4 grid"):
        score_completion("sudoku_score", "1234", "12\n34")
    assert set(METRICS) == {"list_match_score", "list_shuffle_score", "list_random_insert_score",
                            "list_random_remove_score", "list_random_replace_score", "latin_square_score",
                            "sudoku_score"}
