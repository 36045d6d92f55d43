"""Ripple as an lm-evaluation-harness model (`--model ripple`), and the harness's tasks on local data.

lm-evaluation-harness 0.4.13 finds models only in its own registry: it has no entry-point group
for them, and its CLI has no flag that imports a user module. So `ripple lm-eval ARGS` imports
this module (which registers `ripple`) and hands every argument to the harness's own CLI;
Python code does the same with `import ripple.platform.experiments.harness` before
`lm_eval.simple_evaluate(model="ripple", ...)`.

- `generate_until` decodes with Ripple's engine and any registered decoder, in batches of
  `batch_size` (the same tokens as one at a time), cuts the text at the request's `until` and
  keeps at most `max_gen_toks` tokens; each request's arguments gain a `ripple` entry with its
  NFE, generated tokens, decode seconds, TPS and TPF, which the harness writes to its sample logs.
  A decoder that draws (renoise) seeds request i's generator with `sample_seed(seed, "i")`.
- `loglikelihood` is LLaDA's Monte-Carlo estimate (ML-GSAI/LLaDA `get_log_likelihood.py`):
  `mc_num` draws in batches of `mc_batch`; each row masks a stratified number of the
  continuation's tokens at random places, and the masked tokens' cross-entropy is reweighted
  by the masked fraction. Draws come from a generator seeded with `seed` for every request.
- `loglikelihood_rolling` has no estimator here and is refused in one line.

`task_configs` writes `--include_path` YAMLs that make the packaged gsm8k, minerva_math500,
humaneval and mbpp tasks read a local data directory laid out like ../shared/data.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import lm_eval.models  # noqa: F401  (fills the registry first: lm_eval imports it only into an empty one)
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from ...decoders import get as decoder_class
from ...errors import RippleError
from ...progress import progress
from ...tasks import data as task_data
from ...tasks import gsm8k, humaneval, math500, mbpp
from ...tasks.base import cut_at_stops
from ...tasks.prompting import encode_text
from ..runtime.engine import Engine, GenerationConfig
from ..runtime.checkpoints import require_tokenizer
from .calls import attach_auxiliary, decode_config, load, resolve_decoder
from .evaluate import sample_seed

MODEL_NAME = "ripple"
# model_args besides the decoder's hyperparameters (the harness adds batch_size, max_batch_size, device)
MODEL_ARGS = ("pretrained", "decoder", "gen_length", "block_length", "cache", "dtype", "device", "batch_size",
              "stop_at_eos", "eos_early_stop", "block_align", "sub_block_length", "mc_num", "mc_batch", "seed")


@dataclass(frozen=True)
class SampleStats:
    """What one generated request cost; goes into the harness's sample log under `ripple`."""

    nfe: int
    generated_tokens: int
    decode_seconds: float
    tps: float
    tpf: float | None


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RippleError(f"model_args {key} must be a positive integer, got {value!r}")
    return value


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RippleError(f"model_args {key} takes true or false, got {value!r}")
    return value


@dataclass(frozen=True)
class ModelArgs:
    """Checked model_args: everything but the weights."""

    pretrained: str
    decoder: Any  # a built Scheduler
    config: GenerationConfig
    dtype: str
    device: str
    batch_size: int
    mc_num: int
    mc_batch: int
    seed: int


def check_model_args(pretrained: str = "ripple-tiny", decoder: str = "default", gen_length: int = 256,
                     block_length: int = 32, cache: str = "none", dtype: str = "auto", device: str | None = None,
                     batch_size: int | str = 1, max_batch_size: int | None = None, stop_at_eos: bool = False,
                     eos_early_stop: bool = False, mc_num: int = 128, mc_batch: int = 32, seed: int = 1234,
                     block_align: str = "response", sub_block_length: int | None = None, **params: Any) -> ModelArgs:
    """Every model_arg checked without loading weights (`ripple lm-eval` runs this before the harness
    indexes its tasks, so a typo costs nothing), by the Python API's own checks (calls.py); a problem
    is one RippleError line."""
    cls = decoder_class(str(decoder))
    fields = cls.Params.fields_by_name()
    unknown = [k for k in params if k not in fields]
    if unknown:
        raise RippleError(f"unknown model_args key {unknown[0]!r}; accepted: {', '.join(MODEL_ARGS)}, "
                          f"and decoder {decoder}'s hyperparameters: {', '.join(fields) or '(none)'}")
    built = resolve_decoder(str(decoder), str(pretrained), {k: str(v) for k, v in params.items()})
    if isinstance(batch_size, str) and batch_size.isdigit():
        batch_size = int(batch_size)
    config = decode_config(str(pretrained), built, gen_length=_positive_int("gen_length", gen_length),
                           block_length=_positive_int("block_length", block_length), cache=str(cache),
                           stop_at_eos=_flag("stop_at_eos", stop_at_eos),
                           eos_early_stop=_flag("eos_early_stop", eos_early_stop), block_align=str(block_align),
                           sub_block_length=None if sub_block_length is None else _positive_int(
                               "sub_block_length", sub_block_length))
    if _positive_int("mc_num", mc_num) % _positive_int("mc_batch", mc_batch):
        raise RippleError(f"model_args mc_num ({mc_num}) must be a multiple of mc_batch ({mc_batch})")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RippleError(f"model_args seed must be an integer, got {seed!r}")
    device = str(device or "auto")
    if device.startswith("cuda") and not torch.cuda.is_available():
        # the harness's CLI passes its default device (cuda:0) when none is given; like its HF model, use the CPU
        logging.getLogger(__name__).warning("device %s is not available here; using the CPU", device)
        device = "cpu"
    return ModelArgs(str(pretrained), built, config, str(dtype), device, _positive_int("batch_size", batch_size),
                     mc_num, mc_batch, seed)


@register_model(MODEL_NAME)
class RippleLM(LM):
    """`lm_eval --model ripple --model_args pretrained=M,decoder=D,gen_length=G,block_length=B,...`"""

    instances: list["RippleLM"] = []  # every one made in this process, for the summary `ripple lm-eval` prints

    def __init__(self, **model_args: Any) -> None:
        super().__init__()
        checked = check_model_args(**model_args)
        self.decoder, self.config, self.batch_size = checked.decoder, checked.config, checked.batch_size
        self.mc_num, self.mc_batch, self.seed = checked.mc_num, checked.mc_batch, checked.seed
        require_tokenizer(checked.pretrained, "the harness sends text")  # before the weights load
        self.lm = load(checked.pretrained, dtype=checked.dtype, device=checked.device)
        self.tokenizer = self.lm.tokenizer
        self.engine = Engine.from_loaded(self.lm)
        self.engine.auxiliary.update(attach_auxiliary(self.lm, self.decoder))  # a verifier it names, once
        self.stats: dict[str, list[SampleStats]] = {}  # task name -> its generated requests' stats
        RippleLM.instances.append(self)

    # ------------------------------------------------------------------ chat templates
    @property
    def tokenizer_name(self) -> str:
        return str(self.lm.path).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.tokenizer, "chat_template", None)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """As the harness's HF model renders a conversation (Ripple's `--chat` gives the same text)."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise RippleError(f"--apply_chat_template needs a chat template; model {self.lm.name!r}'s tokenizer has none")
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)

    # ------------------------------------------------------------------ generation
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        results: list[str | None] = [None] * len(requests)
        bar = progress(total=len(requests), disable=disable_tqdm, desc=f"ripple {self.decoder.name}", unit="request")
        for start in range(0, len(requests), self.batch_size):
            chunk = list(enumerate(requests))[start: start + self.batch_size]
            prompts = []
            for _, req in chunk:
                context, kwargs = req.args[0], dict(req.args[1])
                if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0) > 0:
                    raise RippleError("ripple decodes by its decoder's rule; gen_kwargs do_sample=true or "
                                      "temperature>0 are not supported (give a greedy task or drop them)")
                prompts.append(encode_text(self.tokenizer, context))
            outs = self.engine.generate(prompts, self.decoder, self.config,
                                        seeds=[sample_seed(self.seed, str(i)) for i, _ in chunk])
            for (i, req), out in zip(chunk, outs):
                context, kwargs = req.args[0], dict(req.args[1])
                keep = out.generated_tokens
                if kwargs.get("max_gen_toks") is not None:
                    keep = min(keep, int(kwargs["max_gen_toks"]))
                text = self.tokenizer.decode(list(out.tokens[:keep]), skip_special_tokens=True)
                until = kwargs.get("until") or ()
                text = cut_at_stops(text, (until,) if isinstance(until, str) else tuple(until))
                stats = SampleStats(out.nfe, out.generated_tokens, out.decode_seconds, out.tps,
                                    out.generated_tokens / out.nfe if out.nfe else None)
                self.stats.setdefault(req.task_name or "", []).append(stats)
                self.cache_hook.add_partial("generate_until", (context, req.args[1]), text)
                req.arguments = (context, {**kwargs, MODEL_NAME: asdict(stats)})
                results[i] = text
            bar.update(len(chunk))
        bar.close()
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ likelihood
    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        if self.engine.block_causal:
            raise RippleError(f"loglikelihood: model {self.lm.name!r} is a block-diffusion family; the Monte-Carlo "
                              "estimator needs a bidirectional one (LLaDA, Dream)")
        out = []
        for req in progress(requests, disable=disable_tqdm, desc="ripple loglikelihood", unit="request"):
            context, continuation = req.args[0], req.args[1]
            prefix, target = self._encode_pair(context, continuation)
            generator = torch.Generator().manual_seed(self.seed)
            ll = mc_loglikelihood(self.lm.model, prefix, target, mask_id=self.lm.mask_id, mc_num=self.mc_num,
                                  mc_batch=self.mc_batch, generator=generator, device=self.lm.device)
            out.append((ll, False))  # whether the continuation is the greedy one is not estimated
            self.cache_hook.add_partial("loglikelihood", (context, continuation), (ll, False))
        return out

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context ids as a prompt, and the continuation's ids as the whole text tokenises them."""
        spaces = len(context) - len(context.rstrip())
        if spaces:  # the space goes with the continuation, as the harness's models do
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        prefix, whole = encode_text(self.tokenizer, context), encode_text(self.tokenizer, context + continuation)
        if whole[:len(prefix)] == prefix and len(whole) > len(prefix):
            return prefix, whole[len(prefix):]
        target = list(self.tokenizer(continuation, add_special_tokens=False)["input_ids"])
        if not target:
            raise RippleError(f"loglikelihood: the continuation {continuation!r} has no tokens")
        return prefix, target

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        raise RippleError("ripple has no estimator for loglikelihood_rolling (perplexity tasks such as wikitext); "
                          "it serves generate_until and loglikelihood tasks")

    # ------------------------------------------------------------------ summary
    def summary(self) -> list[str]:
        """One line per task: mean NFE, TPF (generated tokens / NFE) and TPS (generated tokens / decode s)."""
        lines = []
        for task, rows in sorted(self.stats.items()):
            nfe = sum(r.nfe for r in rows)
            tokens = sum(r.generated_tokens for r in rows)
            seconds = sum(r.decode_seconds for r in rows)
            tpf = f"{tokens / nfe:.2f}" if nfe else "-"
            tps = f"{tokens / seconds:.1f}" if seconds > 0 else "-"
            lines.append(f"ripple | {task} | {self.decoder.name} {self.decoder.params.to_dict()} | cache "
                         f"{self.config.cache} | n {len(rows)} | mean NFE {nfe / len(rows):.2f} | TPF {tpf} | TPS {tps}")
        return lines


def draw_masks(target_len: int, rows: int, generator: torch.Generator) -> torch.Tensor:
    """[rows, target_len] bool: LLaDA's stratified masking. One draw k in 1..target_len; row i masks
    about k + i * target_len / rows positions (wrapped into 1..target_len), placed at random."""
    k = int(torch.randint(1, target_len + 1, (1,), generator=generator))
    counts = torch.round(torch.linspace(float(k), k + (rows - 1) * (target_len / rows), steps=rows)).long()
    counts = (counts - 1) % target_len + 1  # [rows]
    masks = torch.arange(target_len)[None, :] < counts[:, None]  # [rows, T]
    return torch.stack([row[torch.randperm(target_len, generator=generator)] for row in masks])


@torch.inference_mode()
def mc_loglikelihood(model, prefix: list[int], target: list[int], *, mask_id: int, mc_num: int, mc_batch: int,
                     generator: torch.Generator, device: torch.device | str = "cpu") -> float:
    """log p(target | prefix) by LLaDA's Monte-Carlo estimator (module docstring)."""
    P, T = len(prefix), len(target)
    seq = torch.tensor(prefix + target, device=device)[None, :].expand(mc_batch, -1)  # [b, L]
    positions = torch.arange(P + T, device=device)[None, :].expand(mc_batch, -1)  # [b, L]
    shift = int(getattr(model, "shift", 0))
    losses = []
    for _ in range(mc_num // mc_batch):
        masked = draw_masks(T, mc_batch, generator).to(device)  # [b, T]
        where = torch.cat([torch.zeros(mc_batch, P, dtype=torch.bool, device=device), masked], dim=1)  # [b, L]
        noisy = torch.where(where, torch.full_like(seq, mask_id), seq)
        logits = model(noisy, positions).logits.float()  # [b, L, V]
        if shift:  # the prediction for position i sits at i - 1 (position 0 keeps its own)
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        fraction = (masked.sum(dim=1, keepdim=True) / T).expand(-1, P + T)  # [b, L]
        loss = F.cross_entropy(logits[where], seq[where], reduction="none") / fraction[where]
        losses.append(loss.sum().item() / mc_batch)
    return -math.fsum(losses) / len(losses)


# ---------------------------------------------------------------------------- local task data
def task_configs(data_dir: str | Path, folder: str | Path) -> Path:
    """Write YAMLs into `folder` that re-declare the packaged gsm8k, minerva_math500, humaneval and
    mbpp tasks (each includes the harness's own file) with `dataset_path: json` on the files of a
    local data directory; pass `folder` as the harness's `--include_path`. Returns `folder`."""
    import lm_eval.tasks

    root = Path(lm_eval.tasks.__file__).parent
    local = task_data.data_dir(data_dir)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    def path(task: str, source: task_data.Source) -> str:
        for rel in source.local:
            if (local / rel).is_file():
                return str((local / rel).resolve())
        raise RippleError(f"task {task}: none of {', '.join(source.local)} found in data directory {str(local)!r}")

    tasks = {
        "gsm8k": ("gsm8k/gsm8k.yaml", {"train": path("gsm8k", gsm8k.TRAIN), "test": path("gsm8k", gsm8k.TEST)}, {}),
        "minerva_math500": ("minerva_math/minerva_math500.yaml", {"test": path("math500", math500.TEST)}, {}),
        "humaneval": ("humaneval/humaneval.yaml", {"test": path("humaneval", humaneval.TEST)}, {}),
        # the local file holds every task id; the test split is 11-510
        "mbpp": ("mbpp/mbpp.yaml", {"test": path("mbpp", mbpp.TEST)},
                 {"process_docs": "!function ripple.tasks.mbpp.harness_test_docs"}),
    }
    import json

    for name, (include, files, extra) in tasks.items():
        lines = [f"include: {json.dumps(str(root / include))}", f"task: {name}", "dataset_path: json",
                 "dataset_name: null", "dataset_kwargs:", "  data_files:"]
        lines += [f"    {split}: {json.dumps(file)}" for split, file in files.items()]
        lines += [f"{key}: {value}" for key, value in extra.items()]
        (folder / f"ripple_local_{name}.yaml").write_text("\n".join(lines) + "\n")
    return folder
