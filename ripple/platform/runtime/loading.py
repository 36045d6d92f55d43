"""Load a dLLM from a Hugging Face format directory or a hub id, without remote code.

The same path serves the 8B checkpoints and the tiny golden/embedded ones: read
config.json, pick the family by `model_type`, build the module on the meta device (without
running its layers' random initialisers: `hollow`) and stream tensors shard by shard straight into
the requested dtype and device.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ...errors import RippleError
from .checkpoints import (  # noqa: F401 (re-exported: the facts read before any weights load)
    EMBEDDED, TASKS_NEED_A_TOKENIZER, block_aligned, config_mask_id, config_noise, dllm_family, generation_defaults, has_tokenizer,
    local_weights_digest, read_config, require_tokenizer, resolve_model_dir, weight_files, weights_digest, weights_sha256)
from .models import DiffusionTransformer, get_family
from .models.family import refuse_prompt

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_END_OF_TURN_NAMES = ("<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>")
# mask tokens that checkpoints add to their tokenizer without naming them in config.json or as the
# tokenizer's mask_token (Fast-dLLM v2's `|<MASK>|`, listed in added_tokens.json)
_MASK_NAMES = ("|<MASK>|",)


@dataclass
class LoadedModel:
    """A model ready for the engine plus the token facts the engine needs."""

    model: DiffusionTransformer | nn.Module  # a uniform-noise family's own module (DiffusionGemma)
    name: str
    path: Path
    model_type: str
    mask_id: int | None  # None only for a uniform-noise family or a causal LM (no mask token)
    eos_ids: tuple[int, ...]  # the ids that end a response, by the family's `stop_ids` rule
    pad_id: int
    max_positions: int
    device: torch.device
    dtype: torch.dtype
    tokenizer: Any = None
    config: dict = field(default_factory=dict)

    @property
    def shift(self) -> int:
        return getattr(self.model, "shift", 0)  # a uniform-noise family does not shift

    @property
    def causal(self) -> bool:
        """A causal LM (`load_causal`), never handed to a decoder."""
        return bool(getattr(self.model, "causal", False))


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise RippleError(f"unknown dtype {name!r}; accepted: auto, {', '.join(DTYPES)}")
    return DTYPES[name]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise RippleError(f"unknown device {name!r}; accepted: auto, cpu, cuda, cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RippleError(f"device {name!r} requested but CUDA is not available here; use --device cpu")
    return dev


_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool}


@dataclass(frozen=True)
class _Entry:
    key: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # absolute byte offset in the file
    nbytes: int


def _entries(f: Path) -> list[_Entry]:
    """The tensors a safetensors file declares, checked against the file's size."""
    import struct

    size = f.stat().st_size
    with open(f, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise RippleError(f"checkpoint file {f} is corrupt or unreadable (no safetensors header)")
        n = struct.unpack("<Q", head)[0]
        if n > min(size - 8, 1 << 28):
            raise RippleError(f"checkpoint file {f} is corrupt or unreadable (header length {n} past the file's end)")
        try:
            header = json.loads(fh.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RippleError(f"checkpoint file {f} is corrupt or unreadable (its header is not JSON)") from None
    out = []
    try:
        for key, meta in header.items():
            if key == "__metadata__":
                continue
            dtype = _ST_DTYPES[meta["dtype"]]
            shape = tuple(int(d) for d in meta["shape"])
            begin, end = (int(o) for o in meta["data_offsets"])
            numel = 1
            for d in shape:
                numel *= d
            if end - begin != numel * dtype.itemsize or 8 + n + end > size or begin < 0:
                raise ValueError(key)
            out.append(_Entry(key, dtype, shape, 8 + n + begin, end - begin))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RippleError(f"checkpoint file {f} is corrupt or unreadable (bad entry {exc})") from None
    return out


def weight_bytes(files: list[Path], dtype: torch.dtype) -> int:
    """Bytes the checkpoint's floating-point tensors take in `dtype`, from the headers alone."""
    return sum(e.nbytes // e.dtype.itemsize * (dtype.itemsize if e.dtype.is_floating_point else e.dtype.itemsize)
               for f in files for e in _entries(f))


def check_device_memory(files: list[Path], device: torch.device, dtype: torch.dtype, name: str) -> None:
    """Refuse, before anything is allocated, a GPU whose free memory cannot hold the weights."""
    if device.type != "cuda":
        return
    need = weight_bytes(files, dtype)
    free, total = torch.cuda.mem_get_info(device)
    if need > free:
        raise RippleError(
            f"model {name!r} needs {need / 2**30:.1f} GiB for its weights in {str(dtype).removeprefix('torch.')}, "
            f"but {device} has {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB; use a larger GPU "
            f"(one GPU per worker: a model larger than one GPU does not load)"
        )


def _read_into(fh, entry: _Entry, dst: torch.Tensor, f: Path) -> None:
    """Copy one tensor's bytes from the file into the contiguous CPU tensor `dst` (plain reads, no
    memory map: pages of a mapped shard would count towards the process's resident memory)."""
    fh.seek(entry.offset)
    view = memoryview(dst.reshape(-1).view(torch.uint8).numpy())
    if fh.readinto(view) != entry.nbytes:
        raise RippleError(f"checkpoint file {f} is corrupt or unreadable (tensor {entry.key!r} is truncated)")


def _load_weights(model: nn.Module, files: list[Path], rename, tied: bool, device, dtype) -> None:
    """Stream every tensor, one at a time, into its parameter on `device` in `dtype`.

    A key the family renames to (name, index) fills `param[index]` of a stacked parameter (MoE
    experts): the parameter is allocated once and filled slice by slice, so peak host memory
    stays near the weights' own size."""
    wanted = dict(model.state_dict(keep_vars=True))
    loaded: dict[str, torch.Tensor] = {}
    filled: dict[str, int] = {}
    seen: set = set()
    direct = device.type == "cpu"
    for f in files:
        entries = _entries(f)
        try:
            fh = open(f, "rb")
        except OSError as exc:
            raise RippleError(f"checkpoint file {f} is corrupt or unreadable ({exc})") from None
        with fh:
            for e in entries:
                target = rename(e.key)
                if target is None:
                    continue
                ours, index = (target, ()) if isinstance(target, str) else target
                param = wanted.get(ours)
                if param is None or any(not 0 <= i < n for i, n in zip(index, param.shape)):
                    raise RippleError(f"checkpoint {f.name}: tensor {e.key!r} does not fit this config")
                shape = tuple(param.shape[len(index):])
                if e.shape != shape:
                    raise RippleError(
                        f"checkpoint {f.name}: tensor {e.key!r} has shape {e.shape}, config.json implies {shape}"
                    )
                if (ours, index) in seen:
                    raise RippleError(f"checkpoint: tensor {e.key!r} appears twice")
                seen.add((ours, index))
                if ours not in loaded:
                    loaded[ours] = torch.empty(tuple(param.shape), dtype=dtype, device=device)
                dst = loaded[ours][index] if index else loaded[ours]  # [*shape], contiguous
                if direct and e.dtype == dtype:
                    _read_into(fh, e, dst, f)
                else:
                    tmp = torch.empty(e.shape, dtype=e.dtype)
                    _read_into(fh, e, tmp, f)
                    dst.copy_(tmp)
                filled[ours] = filled.get(ours, 0) + dst.numel()
    if tied and "head.weight" not in loaded and "embed.weight" in loaded:
        loaded["head.weight"] = loaded["embed.weight"]
        filled["head.weight"] = filled["embed.weight"]
    missing = sorted(n for n, p in wanted.items() if filled.get(n, 0) != p.numel())
    if missing:
        raise RippleError(f"checkpoint lacks {len(missing)} tensor(s), e.g. {missing[0]!r}")
    model.load_state_dict(loaded, assign=True, strict=True)


def _declared_tokenizer_class(path: Path) -> str | None:
    try:
        return json.loads((path / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def load_tokenizer(path: Path):
    """AutoTokenizer without remote code; fall back to tokenizer.json for custom classes."""
    if not has_tokenizer(path):
        return None
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # it warns that config.json's model_type is unknown to it
    if _declared_tokenizer_class(path) == "TokenizersBackend" and (path / "tokenizer.json").exists():
        # tokenizer.json as it is, as the file declares: AutoTokenizer would impose the model type's own class
        # on some types (qwen2: Qwen2Tokenizer, its own pre-tokenizer and an added <|endoftext|>), and
        # ripple-tiny-ar is a qwen2 checkpoint with ripple-tiny's tokenizer. AutoTokenizer is not even
        # imported here: importing it indexes every model of transformers (about 2.5 s of CPU per process)
        from transformers import TokenizersBackend

        return TokenizersBackend.from_pretrained(str(path))
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except Exception as first:  # custom tokenizer classes (Dream) need remote code; we do not run it
        cfg_file = path / "tokenizer_config.json"
        tcfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
        special = {k: v for k, v in tcfg.items() if k.endswith("_token") and isinstance(v, str)}
        if (path / "tokenizer.json").exists():
            tok = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"), **special)
        elif (path / "vocab.json").exists() and (path / "merges.txt").exists():
            from transformers import Qwen2TokenizerFast

            tok = Qwen2TokenizerFast(vocab_file=str(path / "vocab.json"), merges_file=str(path / "merges.txt"), **special)
        else:
            raise RippleError(f"tokenizer in {path} cannot be loaded without remote code ({first})") from None
        if tcfg.get("chat_template"):
            tok.chat_template = tcfg["chat_template"]
        return tok


def _as_ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


def _added_mask_id(path: Path, tokenizer) -> int | None:
    """The id of an added mask token (`_MASK_NAMES`) in the tokenizer's vocabulary or added_tokens.json."""
    added = path / "added_tokens.json"
    vocab = tokenizer.get_vocab() if tokenizer is not None else {}
    if not vocab and added.exists():
        try:
            vocab = json.loads(added.read_text())
        except json.JSONDecodeError:
            raise RippleError(f"checkpoint {path}: added_tokens.json is not valid JSON") from None
    found = [vocab[n] for n in _MASK_NAMES if isinstance(vocab, dict) and isinstance(vocab.get(n), int)]
    return found[0] if found else None


def special_ids(cfg: dict, path: Path, tokenizer, needs_mask: bool = True,
                stop_rule: str = "every") -> tuple[int | None, tuple[int, ...], int]:
    """mask id (None when not `needs_mask` and none is named: a uniform-noise family), the ids that
    end a response by the family's `stop_rule` (family.STOP_RULES) and pad id, from config files and
    the tokenizer."""
    mask_id = cfg.get("mask_token_id")
    if mask_id is None and tokenizer is not None:
        mask_id = tokenizer.mask_token_id
    if mask_id is None and needs_mask:
        mask_id = _added_mask_id(path, tokenizer)
    if mask_id is None and needs_mask:
        raise RippleError(f"checkpoint {path}: no mask_token_id in config.json nor a mask token in the tokenizer")
    gen_cfg, gen = path / "generation_config.json", {}
    if gen_cfg.exists():
        try:
            gen = json.loads(gen_cfg.read_text())
        except json.JSONDecodeError:
            raise RippleError(f"checkpoint {path}: generation_config.json is not valid JSON") from None
    named = {"config": _as_ids(cfg.get("eos_token_id")), "generation_config": _as_ids(gen.get("eos_token_id"))}
    every = named["config"] + named["generation_config"]
    if tokenizer is not None:
        every += _as_ids(tokenizer.eos_token_id)
        vocab = tokenizer.get_vocab()
        every += [vocab[n] for n in _END_OF_TURN_NAMES if n in vocab]
    every = [e for e in dict.fromkeys(every) if e != mask_id]
    stops = [e for e in dict.fromkeys(named.get(stop_rule, [])) if e != mask_id] or every
    pad = cfg.get("pad_token_id")
    if pad is None:
        pad = gen.get("pad_token_id")
    if pad is None and tokenizer is not None:
        pad = tokenizer.pad_token_id
    if pad is None:
        pad = every[0] if every else 0
    return None if mask_id is None else int(mask_id), tuple(stops), int(pad)


class _SkipInitialisers(TorchFunctionMode):
    """Every torch.nn.init function returns its tensor untouched (they reach a torch-function mode
    through torch's override protocol)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


@contextmanager
def hollow() -> Iterator[None]:
    """Build modules on the meta device without running their layers' random initialisers: meta
    tensors hold no values to fill, and torch's meta kernels of the random fills import the compiler
    (torch._dynamo, about 2.5 s of CPU) the first time they run. A module built here gets its values
    from a checkpoint (`load_model`) or from `to_empty` and a fill of its own (benchmarks)."""
    with torch.device("meta"), _SkipInitialisers():
        yield


def refuse_prompt_ids(name: str, prompts) -> None:
    """One line if a user's prompt (each of `prompts`: token ids) holds an id the family refuses
    (DiffusionGemma's image token), read from config.json once, before any weights load. Generated tokens
    are never checked: they are text whatever their id."""
    cfg = read_config(resolve_model_dir(name))
    family = dllm_family(name, cfg)
    refusals = family.prompt_refusals(cfg)
    for ids in prompts:
        refuse_prompt(family.name, ids, refusals)


def load_model(name: str, dtype: str = "auto", device: str = "auto", tokenizer: Any = None) -> LoadedModel:
    """The diffusion LM `name` on `device` in `dtype`; `tokenizer`: this checkpoint's, when the caller has
    already loaded it (to tokenize a prompt before the weights load). A causal LM is refused."""
    return _load(name, dtype, device, tokenizer, causal=False)


def load_causal(name: str, dtype: str = "auto", device: str = "auto", tokenizer: Any = None) -> LoadedModel:
    """The causal LM `name` (a verifier: ripple/platform/runtime/causal.py) on `device` in `dtype`; a
    diffusion LM is refused."""
    return _load(name, dtype, device, tokenizer, causal=True)


def _load(name: str, dtype: str, device: str, tokenizer: Any, causal: bool) -> LoadedModel:
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    path = resolve_model_dir(name)
    cfg = read_config(path)
    if causal:
        from .models.family import causal_families

        family = get_family(cfg["model_type"])
        if not family.causal:
            raise RippleError(f"model {name!r} is a diffusion LM ({family.name}), not a causal LM; "
                              f"causal model_types: {', '.join(causal_families())}")
    else:
        family = dllm_family(name, cfg)
    tcfg = family.to_config(cfg)
    files = weight_files(path)
    check_device_memory(files, dev, dt, name)
    with hollow():
        model = family.build(tcfg)
    _load_weights(model, files, family.rename, family.tied_head(cfg), dev, dt)
    model.eval().requires_grad_(False)
    if tokenizer is None:
        tokenizer = load_tokenizer(path)
    mask_id, eos_ids, pad_id = special_ids(cfg, path, tokenizer, needs_mask=family.noise == "mask" and not causal,
                                           stop_rule=family.stop_ids)
    if causal:
        mask_id = None  # a causal LM has no mask token, whatever its tokenizer names (ripple-tiny-ar shares ripple-tiny's)
    return LoadedModel(
        model=model, name=name, path=path, model_type=family.name, mask_id=mask_id, eos_ids=eos_ids,
        pad_id=pad_id, max_positions=family.max_positions(cfg), device=dev, dtype=dt,
        tokenizer=tokenizer, config=cfg,
    )
