"""Chat wrapping: free text as one user turn; task prompts in the harness's two forms (multi-turn, single-turn)."""
import pytest
from transformers import AutoTokenizer

from ripple.errors import RippleError
from ripple.platform.runtime.loading import EMBEDDED
from ripple.tasks import get_task
from ripple.tasks.prompting import chat_form, chat_messages, chat_text, encode_prompt

TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture()
def tokenizer():
    return AutoTokenizer.from_pretrained(str(EMBEDDED["ripple-tiny"]))


def test_plain_prompts_are_tokenised_as_they_are(tokenizer, shared):
    ex = get_task("gsm8k", data_dir=shared / "data").examples("test", 1)[0]
    assert encode_prompt(tokenizer, ex.prompt) == tokenizer(ex.prompt)["input_ids"]


def test_chat_wraps_the_whole_few_shot_prompt_as_one_user_turn(tokenizer, shared):
    tokenizer.chat_template = TEMPLATE
    ex = get_task("mbpp", data_dir=shared / "data").examples("test", 1)[0]
    text = chat_text(tokenizer, ex.prompt)
    assert text == f"{tokenizer.bos_token}<|user|>\n{ex.prompt}<|end|>\n<|assistant|>\n"
    ids = encode_prompt(tokenizer, ex.prompt, chat=True)
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]  # BOS from the template, not twice
    assert ids.count(tokenizer.bos_token_id) == 1


def test_chat_without_a_template_is_a_clear_error(tokenizer):
    tokenizer.chat_template = None
    with pytest.raises(RippleError, match="no chat template"):
        encode_prompt(tokenizer, "hi", chat=True)


def test_the_chat_forms_are_the_harness_two_and_true_means_its_default():
    assert chat_form(True) == "multiturn" and chat_form(False) is None and chat_form(None) is None
    assert chat_form("singleturn") == "singleturn"
    with pytest.raises(RippleError, match="accepted: multiturn, singleturn"):
        chat_form("both")


def test_multiturn_puts_each_shot_in_its_own_turns(shared):
    ex = get_task("gsm8k", data_dir=shared / "data").examples("test", 1)[0]
    messages = chat_messages(ex, "multiturn")
    assert [m["role"] for m in messages] == ["user", "assistant"] * 5 + ["user"]
    assert "".join(m["content"] + (" " if m["role"] == "user" else "\n\n") for m in messages[:-1]) + \
        messages[-1]["content"] == ex.prompt  # the plain prompt is the same turns with the harness's delimiters
    assert chat_messages(ex, "singleturn") == [{"role": "user", "content": ex.prompt}]
