"""From a task's prompt to the model's input ids, optionally through a chat template.

Tasks build the plain lm-evaluation-harness prompt (few-shot examples, then the question).
For instruct models the prompt goes through the tokenizer's chat template in one of the two
forms of lm-eval's `--apply_chat_template` (0.4.13):
- `multiturn` (the harness's default, `--fewshot_as_multiturn`): each few-shot example is a
  user turn and an assistant turn, and the question is the last user turn;
- `singleturn` (`--fewshot_as_multiturn false`): the whole plain prompt is one user turn.
Both end with the assistant header. Code tasks still score against the plain prompt, so
wrapping changes only what the model sees.
"""
from __future__ import annotations

from ripple.errors import RippleError
from ripple.tasks.base import Example

CHAT_FORMS = ("multiturn", "singleturn")


def chat_form(chat: bool | str | None) -> str | None:
    """None (no template), or one of CHAT_FORMS; `True` is the harness's default, multi-turn."""
    if chat is None or chat is False or chat == "":
        return None
    if chat is True:
        return "multiturn"
    if chat not in CHAT_FORMS:
        raise RippleError(f"unknown chat form {chat!r}; accepted: {', '.join(CHAT_FORMS)}")
    return chat


def chat_messages(example: Example, form: str) -> list[dict[str, str]]:
    """The conversation lm-eval sends to the chat template for `example` in `form`."""
    if form == "singleturn" or not example.shots:
        return [{"role": "user", "content": example.prompt}]
    turns = [m for user, assistant in example.shots
             for m in ({"role": "user", "content": user}, {"role": "assistant", "content": assistant})]
    return turns + [{"role": "user", "content": example.question or example.prompt}]


def chat_text(tokenizer, messages: str | list[dict[str, str]]) -> str:
    """`messages` (or one text as a user turn) through the tokenizer's chat template, ready for the reply."""
    if not getattr(tokenizer, "chat_template", None):
        raise RippleError("chat wrapping requested but this model's tokenizer has no chat template")
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of a prompt text; BOS is added by the tokenizer unless the text already starts with it."""
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and text.startswith(bos))
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])


def encode_prompt(tokenizer, text: str, chat: bool | str | None = False) -> list[int]:
    """Token ids of a free prompt text, as one user turn when `chat` asks for a template."""
    return encode_text(tokenizer, chat_text(tokenizer, text) if chat_form(chat) else text)


def encode_example(tokenizer, example: Example, chat: bool | str | None = False) -> list[int]:
    """Token ids of a task example's prompt, in the chat form `chat` names (module docstring)."""
    form = chat_form(chat)
    return encode_text(tokenizer, chat_text(tokenizer, chat_messages(example, form)) if form else example.prompt)
