"""GSM8K answer extraction and exact match, as lm-evaluation-harness's `gsm8k` task does it.

Reported numbers must be comparable with published lm-eval GSM8K results, so
this follows the task config to the character (summary and sources in
`../shared/data/EVAL_PROTOCOLS.md`): two regex filter pipelines, each followed
by `take_first`, and the `exact_match` metric with `ignore_case: true`,
`ignore_punctuation: false` and four `regexes_to_ignore` applied to BOTH the
prediction and the reference.
"""

from __future__ import annotations

import re

from ripple.tasks.base import Score

STRICT_PATTERN = re.compile(r"#### (\-?[0-9\.\,]+)")  # strict-match, group_select 0 (first match)
FLEXIBLE_PATTERN = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")  # flexible-extract, group_select -1 (last)
FALLBACK = "[invalid]"
# Applied in this order with re.sub(pattern, "", text); `(?s).*#### ` cuts a full reference down to its number.
REGEXES_TO_IGNORE: tuple[str, ...] = (",", r"\$", r"(?s).*#### ", r"\.$")


def _regex_filter(pattern: re.Pattern[str], text: str, group_select: int) -> str:
    """lm-eval's `regex` filter: findall, pick one match, first non-empty group, strip."""
    matches = pattern.findall(text)
    if not matches:
        return FALLBACK
    match = matches[group_select]
    if isinstance(match, tuple):  # several groups: the harness keeps the first non-empty one
        non_empty = [group for group in match if group]
        if not non_empty:
            return FALLBACK
        match = non_empty[0]
    return match.strip()


def strict_extract(text: str) -> str:
    """The number after the first `#### `, or "[invalid]" when the model never wrote one."""
    return _regex_filter(STRICT_PATTERN, text, 0)


def flexible_extract(text: str) -> str:
    """The last number-like token in the text (may keep `$`, `,` and `.`), or "[invalid]"."""
    return _regex_filter(FLEXIBLE_PATTERN, text, -1)


def normalize(text: str) -> str:
    """What `exact_match` compares: ignored regexes removed, then lower-cased."""
    for pattern in REGEXES_TO_IGNORE:
        text = re.sub(pattern, "", text)
    return text.lower()


def gold_answer(reference_text: str) -> str:
    """The gold value exact_match sees: a full GSM8K solution reduced to its final number."""
    return normalize(reference_text)


def score_gsm8k(completion: str, gold: str) -> Score:
    """Score one completion; `gold` may be a bare answer or a full `... #### N` solution.

    `correct` is the strict match, the number lm-eval reports first for gsm8k.
    """
    target = normalize(gold)
    strict = strict_extract(completion)
    flexible = flexible_extract(completion)
    strict_match = normalize(strict) == target
    flexible_match = normalize(flexible) == target
    return Score(
        correct=strict_match,
        details={
            "strict_match": strict_match,
            "flexible_match": flexible_match,
            "strict_extracted": strict,
            "flexible_extracted": flexible,
            "gold": target,
        },
    )
