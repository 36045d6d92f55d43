"""From a task's prompt text to the model's input ids, optionally through a chat template.

Tasks build the plain lm-evaluation-harness prompt (few-shot examples, then the
question). For instruct models, `chat=True` wraps that whole text as one user
turn and appends the assistant header, as lm-eval's `--apply_chat_template`
does without `--fewshot_as_multiturn`. Code tasks still score against the plain
prompt, so wrapping changes only what the model sees.
"""
from __future__ import annotations

from ripple.errors import RippleError


def chat_text(tokenizer, text: str) -> str:
    """`text` as one user turn of the tokenizer's chat template, ready for the assistant's reply."""
    if not getattr(tokenizer, "chat_template", None):
        raise RippleError("chat wrapping requested but this model's tokenizer has no chat template")
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=False)


def encode_prompt(tokenizer, text: str, chat: bool = False) -> list[int]:
    """Token ids of a prompt; BOS is added by the tokenizer unless the (templated) text already has it."""
    if chat:
        text = chat_text(tokenizer, text)
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and text.startswith(bos))
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])
