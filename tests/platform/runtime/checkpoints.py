"""Shared by the family tests' bad-checkpoint cases: a golden checkpoint copied with config.json
keys changed, and `ripple generate` refusing it in one line; and diffusion-gemma-tiny with a
tokenizer, for the tests that run tasks on it."""
import json
import shutil
from pathlib import Path

from ripple.cli import main


def changed_copy(src: Path, dst: Path, changes: dict, section: str | None = None) -> Path:
    """A writable copy of the checkpoint `src` at `dst`, with config.json keys (those of `section`, such
    as text_config, when given) set to the values in `changes`, or removed where the value is None."""
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    cfg = json.loads((dst / "config.json").read_text())
    target = cfg[section] if section else cfg
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def refused_in_one_line(capsys, model: Path, message: str, decoder: str = "default", block_length: int = 8) -> None:
    """`ripple generate` on `model` exits 2 with `message` on one line of stderr and nothing on stdout."""
    argv = ["generate", "--model", str(model), "--input-ids", "5,6,7", "--decoder", decoder, "--gen-length", "8",
            "--block-length", str(block_length), "--device", "cpu"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1 and captured.out == "", captured.err


def gemma_with_tokenizer(golden, dst):
    """diffusion-gemma-tiny with a character-level tokenizer (the golden folder ships none; tasks need one)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    shutil.copytree(golden / "diffusion-gemma-tiny", dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    vocab.update({chr(c): 4 + i for i, c in enumerate(range(32, 127))})  # printable ASCII, ids 4..98
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.save(str(dst / "tokenizer.json"))
    (dst / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>"}))
    return dst
