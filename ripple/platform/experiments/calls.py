"""One model, one decoder, a call and its result: the core of the Python API (`ripple.load`,
`ripple.generate`, `ripple.evaluate`; ripple/api.py is the front door). `ripple generate`, `ripple
eval`, the lm-evaluation-harness model and `ripple.testing` call these functions, so a setting is
checked and a configuration built in one place, and bad input is the same one-line RippleError
everywhere (the command prints it and exits 2).

Checks come before any weights load, in the order the commands have always made them: the
decoder and its settings, the model's kind of family, lengths and cache, the prompt ids, then the
load. A decoder is a registered name with its settings, or a Scheduler instance or subclass the
caller defined (never registered): records name the latter `local:NAME`.

Lengths not given come from the task's own (`Task.gen_length`, with the block equal to the
response; evaluate only), else from the model's generation_config.json (`gen_length` or
`max_new_tokens`, and `block_length`), else from `DEFAULT_GEN_LENGTH` and `DEFAULT_BLOCK_LENGTH`
(48 and 16, what `ripple eval` always defaulted to).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ...decoders import Scheduler, check_noise, default_decoder, get, label
from ...errors import RippleError

if TYPE_CHECKING:
    import polars as pl

    from ..runtime.generation import GenerationConfig
    from ..runtime.loading import LoadedModel
    from .evaluate import CellResult, SampleResult
    from .metrics import CellMetrics

DEFAULT_GEN_LENGTH, DEFAULT_BLOCK_LENGTH = 48, 16
_LENGTH_KEYS = {"gen_length": ("gen_length", "max_new_tokens"), "block_length": ("block_length",)}


# ---------------------------------------------------------------------------- models
def model_name(model: str | os.PathLike | LoadedModel) -> str:
    """What records call a model: the name or folder given, or a loaded model's name."""
    return model.name if hasattr(model, "tokenizer") else str(model)


def _config_source(model: str | os.PathLike | LoadedModel) -> str:
    """Where a model's config files are read before (or without) a load."""
    return str(model.path) if hasattr(model, "tokenizer") else str(model)


def load(model: str | os.PathLike | LoadedModel, *, dtype: str = "auto", device: str = "auto") -> LoadedModel:
    """An embedded name (ripple-tiny), a Hugging Face folder or a hub id, loaded with its tokenizer
    (a model loaded already is returned as it is)."""
    from ..runtime.loading import load_model

    if hasattr(model, "tokenizer"):
        return model
    return load_model(str(model), dtype=dtype, device=device)


# ---------------------------------------------------------------------------- decoders and settings
def _setting_strings(cls: type[Scheduler], settings: Mapping[str, Any]) -> dict[str, str]:
    """Hyperparameters as `--set` strings, by public name (`lambda`) or field name (`lam`, which
    Python keywords need)."""
    fields = cls.Params.fields_by_name()
    by_field = {f.name: public for public, f in fields.items()}
    return {(key if key in fields else by_field.get(key, key)): str(value) for key, value in settings.items()}


def resolve_decoder(decoder: str | Scheduler | type[Scheduler] | None, model: str | os.PathLike | LoadedModel,
                    settings: Mapping[str, Any] | None = None) -> Scheduler:
    """The decoder to run on `model`, checked before any weights load: a registered name with its
    settings (those not given come from the model's generation_config.json where the decoder reads it,
    `Scheduler.model_defaults`), a Scheduler subclass with its settings, or a Scheduler instance as it
    is; None is the default for the model's kind of family (`default_decoder`: RPS, renoise on uniform
    noise), the one place `ripple generate` and `ripple eval` without --decoder take it from too.
    A decoder made for another kind of family is refused in one line naming what the model needs.
    A named decoder's bad name or value is refused before torch is imported (a decoder module imports it
    on first use)."""
    settings = dict(settings or {})
    source = _config_source(model)
    if decoder is None:  # which one depends on the family: config.json is read first
        from ..runtime.checkpoints import config_noise

        decoder = default_decoder(config_noise(source)[1])
    if isinstance(decoder, str):
        cls = get(decoder)
    elif isinstance(decoder, type) and issubclass(decoder, Scheduler):
        cls = decoder
    elif isinstance(decoder, Scheduler):
        if settings:
            raise RippleError(f"settings {', '.join(settings)} apply to a decoder given by name or class; "
                              f"decoder {decoder.name!r} is an instance with its own params")
        cls = None
    else:
        raise RippleError(f"decoder must be a registered name or a Scheduler (class or instance), got {decoder!r}")

    def make(strings: dict[str, str]) -> Scheduler:
        return cls(cls.Params.from_strings(cls.name, strings))

    strings = {} if cls is None else _setting_strings(cls, settings)
    built = decoder if cls is None else make(strings)
    from ..runtime.checkpoints import config_noise, generation_defaults

    check_noise(built, *config_noise(source))
    defaults = {} if cls is None else cls.model_defaults(generation_defaults(source))
    return make({**defaults, **strings}) if defaults else built


def attach_auxiliary(lm: LoadedModel, decoder: Scheduler) -> dict[str, Any]:
    """The second models `decoder`'s configuration names (a verifier), loaded beside `lm` on its device
    and dtype, by reference (an engine's `auxiliary`); refused in one line when one cannot serve it; {}
    for decoders without one."""
    held: dict[str, Any] = {}
    if decoder.auxiliary_models():
        from ..runtime.auxiliary import AuxiliaryModels

        AuxiliaryModels(lm).attach(decoder, held)
    return held


def default_lengths(model: str | os.PathLike | LoadedModel, gen_length: int | None = None,
                    block_length: int | None = None) -> tuple[int, int]:
    """(gen_length, block_length): those given, else the model's generation_config.json's, else the
    defaults (module docstring)."""
    from ..runtime.checkpoints import generation_defaults

    given = {"gen_length": gen_length, "block_length": block_length}
    if None in given.values():
        found = generation_defaults(_config_source(model))
        fallback = {"gen_length": DEFAULT_GEN_LENGTH, "block_length": DEFAULT_BLOCK_LENGTH}
        for key, value in given.items():
            if value is None:
                given[key] = next((found[k] for k in _LENGTH_KEYS[key] if isinstance(found.get(k), int)),
                                  fallback[key])
    return given["gen_length"], given["block_length"]


def decode_config(model: str | os.PathLike | LoadedModel, decoder: Scheduler, *, gen_length: int | None = None,
                  block_length: int | None = None, cache: str | None = None, stop_at_eos: bool = False,
                  eos_early_stop: bool = False, block_align: str = "response",
                  sub_block_length: int | None = None) -> GenerationConfig:
    """The run's GenerationConfig, checked (before any weights load): lengths default as
    `default_lengths` says (the block to the response for a decoder with its own, `own_geometry`), the
    cache to the decoder's own."""
    from ..runtime.generation import GenerationConfig
    from ..runtime.checkpoints import block_aligned

    gen, block = default_lengths(model, gen_length, block_length)
    if block_length is None and decoder.own_geometry:  # one block (APD) unless the call sets another, refused
        block = gen
    for name, value in (("gen_length", gen), ("block_length", block)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise RippleError(f"{name} must be a positive integer, got {value!r}")
    cache = cache or decoder.default_cache
    config = GenerationConfig(gen, block, cache, bool(stop_at_eos), bool(eos_early_stop),
                              block_aligned(_config_source(model), gen, block), block_align, sub_block_length)
    if config.cache not in decoder.supported_caches:
        raise RippleError(f"decoder {decoder.name!r} does not support cache {config.cache!r}; "
                          f"supported: {', '.join(decoder.supported_caches)}")
    return config


# ---------------------------------------------------------------------------- prompts
def _as_prompts(prompts: Any) -> tuple[list, bool]:
    """(the prompts, whether one was given alone): a text, a list of ids, or a list of either."""
    def ids(p):
        return isinstance(p, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in p)

    if isinstance(prompts, str) or (ids(prompts) and prompts):
        return [prompts], True
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(p, str) or ids(p) for p in prompts):
        return list(prompts), False
    raise RippleError(f"prompts takes a text, a list of token ids, or a non-empty list of them, got {prompts!r}")


def refuse_ids(ids: Sequence[int], mask_id: int | None, vocab: int | None = None) -> None:
    """Prompt ids that name no token or a hole, in one line."""
    if any(i < 0 for i in ids):
        raise RippleError(f"--input-ids must be non-negative token ids, got {','.join(map(str, ids))!r}")
    if mask_id is not None and mask_id in ids:
        raise RippleError(f"--input-ids contains the model's mask id {mask_id}; a prompt cannot have holes")
    if vocab is not None and max(ids) >= vocab:
        raise RippleError(f"--input-ids contains id {max(ids)}, outside the model's vocabulary of {vocab}")


def refuse_empty(prompts: Sequence, ids: Sequence[Sequence[int]]) -> None:
    """An empty prompt (the text "", no ids, or a text the tokenizer turns into none) in one line, before the
    weights load: decoding continues a prompt, so it needs a token to continue."""
    for i, (prompt, tokens) in enumerate(zip(prompts, ids)):
        if not len(prompt) or not len(tokens):
            which = "the prompt" if len(prompts) == 1 else f"prompt {i + 1} of {len(prompts)}"
            raise RippleError(f"{which} is empty; a prompt needs at least one token (--prompt text or --input-ids)")


def check_seed(seed: Any) -> int:
    """The run's seed (None: 0), an integer."""
    seed = 0 if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RippleError(f"seed must be an integer, got {seed!r}")
    return seed


def prompt_ids(tokenizer, model: str, prompt: str | Sequence[int], chat: bool | str = False) -> list[int]:
    """A prompt's token ids, before the weights load: text through the tokenizer (and the chat template
    when `chat`), ids as given."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise RippleError(f"model {model!r} has no tokenizer files; pass --input-ids instead of --prompt")
        from ...tasks.prompting import encode_prompt

        return encode_prompt(tokenizer, prompt, chat=chat)
    return list(prompt)


# ---------------------------------------------------------------------------- generate
@dataclass(frozen=True)
class Generation:
    """One prompt's decode: the response tokens (gen_length of them) and text, what it cost, and with
    `trace=True` the decode trace's events (one dict per decision, as `ripple generate --trace` writes)."""

    model: str
    decoder: str  # a registered name, or `local:NAME`
    params: dict
    gen_length: int
    block_length: int
    cache: str
    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    text: str | None  # None for a model without tokenizer files
    nfe: int
    lookahead_nfe: int
    decode_seconds: float
    generated_tokens: int
    tps: float
    canvas_tps: float
    edits: int
    encoder_nfe: int
    seed: int
    trace: tuple[dict, ...] | None = None
    reference_nfe: int | None = None  # forwards of the decoder the oracle followed (None: another decoder)
    verifier_nfe: int | None = None  # forwards of the decoder's second model, never in nfe (None: it has none)

    @property
    def tpf(self) -> float | None:
        """Tokens per forward: generated tokens / NFE."""
        return self.generated_tokens / self.nfe if self.nfe else None

    def to_dict(self) -> dict[str, Any]:
        """The record `ripple generate --json` prints."""
        return {"model": self.model, "decoder": self.decoder, "params": self.params, "gen_length": self.gen_length,
                "block_length": self.block_length, "cache": self.cache, "prompt_tokens": len(self.prompt),
                "tokens": list(self.tokens), "text": self.text, "nfe": self.nfe, "lookahead_nfe": self.lookahead_nfe,
                "decode_seconds": self.decode_seconds, "generated_tokens": self.generated_tokens, "tps": self.tps,
                "canvas_tps": self.canvas_tps, "edits": self.edits, "encoder_nfe": self.encoder_nfe, "seed": self.seed,
                "reference_nfe": self.reference_nfe, "verifier_nfe": self.verifier_nfe}


def generate(model, prompts, decoder: str | Scheduler | type[Scheduler] | None = None, *, gen_length: int | None = None,
             block_length: int | None = None, cache: str | None = None, seed: int | None = None,
             chat: bool | str = False, trace: bool = False, dtype: str = "auto", device: str = "auto",
             stop_at_eos: bool = False, eos_early_stop: bool = False, block_align: str = "response",
             sub_block_length: int | None = None, **settings: Any) -> Generation | list[Generation]:
    """Decode one prompt (a text or token ids; a `Generation`) or a list of them (one engine call, a
    list: the same tokens as one call each). `decoder` None: RPS, or the family's own where RPS cannot
    decode it (`resolve_decoder`). `settings` are the decoder's hyperparameters."""
    items, alone = _as_prompts(prompts)
    dec = resolve_decoder(decoder, model, settings)
    from ..runtime.engine import Engine
    from ..runtime.loading import config_mask_id, load_model, load_tokenizer, refuse_prompt_ids, resolve_model_dir
    from .evaluate import completion_text

    config = decode_config(model, dec, gen_length=gen_length, block_length=block_length, cache=cache,
                           stop_at_eos=stop_at_eos, eos_early_stop=eos_early_stop, block_align=block_align,
                           sub_block_length=sub_block_length)
    seed = check_seed(seed)
    source = _config_source(model)
    given = [list(p) for p in items if not isinstance(p, str)]
    if given and chat:
        raise RippleError("--chat applies to --prompt text, not to --input-ids")
    mask_id = config_mask_id(source) if given else None
    for p in given:
        refuse_ids(p, mask_id)
    loaded = hasattr(model, "tokenizer")
    tokenizer = model.tokenizer if loaded else load_tokenizer(resolve_model_dir(source))
    ids = [prompt_ids(tokenizer, source, p, chat) for p in items]  # all before the weights load
    refuse_empty(items, ids)
    refuse_prompt_ids(source, ids)  # the user's prompts only (config.json read once)
    lm = model if loaded else load_model(source, dtype=dtype, device=device, tokenizer=tokenizer)
    for p in ids:
        refuse_ids(p, lm.mask_id, lm.model.vocab_size)  # a mask named only by the tokenizer, the vocabulary
    engine = Engine.from_loaded(lm)
    engine.auxiliary.update(attach_auxiliary(lm, dec))
    events: list[dict] = []
    outs = engine.generate(ids, dec, config, trace=events.append if trace else None, seeds=[seed] * len(ids))
    results = [Generation(model_name(model), label(dec), dec.params.to_dict(), config.gen_length, config.block_length,
                          config.cache, tuple(p), tuple(out.tokens),
                          completion_text(tokenizer, out) if tokenizer is not None else None, out.nfe,
                          out.lookahead_nfe, out.decode_seconds, out.generated_tokens, out.tps, out.canvas_tps,
                          out.edits, out.encoder_nfe, seed,
                          tuple(e for e in events if e.get("sample", 0) == r) if trace else None, out.reference_nfe,
                          out.verifier_nfe)
               for r, (p, out) in enumerate(zip(ids, outs))]
    return results[0] if alone else results


# ---------------------------------------------------------------------------- evaluate
@dataclass(frozen=True, eq=False)  # a DataFrame has no truth value to compare by
class Evaluation:
    """One cell (model x task x decoder x settings) decoded and scored: accuracy in percent with its
    95 % Wilson interval, mean NFE, TPF, TPS, edits per sample, and one row per sample."""

    summary: dict  # what `ripple eval --json` prints
    samples: pl.DataFrame  # one row per sample: id, completion, correct, score (JSON), nfe, tokens, seconds, ...
    metrics: CellMetrics  # the metrics module's numbers (accuracy_text() and the like)

    def __getattr__(self, name: str) -> Any:  # model, task, decoder, accuracy, accuracy_lo, mean_nfe, tpf, tps, ...
        if name.startswith("_") or name in ("summary", "samples", "metrics"):
            raise AttributeError(name)
        if name in self.summary:
            return self.summary[name]
        return getattr(self.metrics, name)  # the numbers the summary leaves out when unset (mean_edits, ...)

    @property
    def interval(self) -> tuple[float, float]:
        """The accuracy's 95 % Wilson interval, in percent."""
        return self.summary["accuracy_lo"], self.summary["accuracy_hi"]

    def mcnemar(self, other: "Evaluation") -> float:
        """The exact McNemar p-value of the two cells' correctness on the samples both scored."""
        from .metrics import mcnemar_exact

        both = self.samples.select("sample_id", "correct").join(
            other.samples.select("sample_id", "correct"), on="sample_id", suffix="_other")
        if both.height == 0:
            raise RippleError("the two evaluations share no sample; compare cells of the same task")
        return mcnemar_exact(both["correct"].to_list(), both["correct_other"].to_list())


def _sample_frame(samples: Sequence[SampleResult]) -> pl.DataFrame:
    import polars as pl

    from .store import dumps

    rows = [{**asdict(s), "score": dumps(s.score)} for s in samples]
    return pl.DataFrame(rows, schema={"sample_id": pl.String, "prompt_tokens": pl.Int64, "completion": pl.String,
                                      "correct": pl.Boolean, "score": pl.String, "nfe": pl.Int64,
                                      "lookahead_nfe": pl.Int64, "decode_seconds": pl.Float64,
                                      "generated_tokens": pl.Int64, "tps": pl.Float64, "canvas_tps": pl.Float64,
                                      "edits": pl.Int64, "encoder_nfe": pl.Int64, "seed": pl.Int64,
                                      "floor_nfe": pl.Int64, "trace": pl.String, "reference_nfe": pl.Int64,
                                      "verifier_nfe": pl.Int64})


def evaluation(cell: CellResult) -> Evaluation:
    return Evaluation(cell.summary(), _sample_frame(cell.samples), cell.stats)


def check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise RippleError(f"--limit must be a positive number of examples, got {limit}")


def evaluate(model, task: str, decoder: str | Scheduler | type[Scheduler] | None = None, *, limit: int | None = None,
             data_dir: str | None = None, chat: bool | str = False, seed: int | None = None,
             gen_length: int | None = None, block_length: int | None = None, cache: str | None = None,
             dtype: str = "auto", device: str = "auto", stop_at_eos: bool = False, eos_early_stop: bool = False,
             block_align: str = "response", sub_block_length: int | None = None, progress: bool = False,
             on_sample: Callable[[SampleResult], None] | None = None, traces: bool = False,
             **settings: Any) -> Evaluation:
    """Decode and score the first `limit` test examples of `task`, one at a time (each example's seed
    derives from `seed` and its id, as in grids). `decoder` None: as in `generate`. `settings` are the
    decoder's hyperparameters. `traces`: keep each sample's decode trace (the samples' `trace` column,
    ripple/platform/runtime/tracing.py)."""
    dec = resolve_decoder(decoder, model, settings)
    from ...tasks import get_task, task_class
    from ...tasks.prompting import chat_form
    from .evaluate import evaluate_cell

    own = task_class(task).gen_length  # a task's own response length (ParallelBench: 32, 64)
    if own and block_length is None:  # such a task runs with the block equal to the response
        block_length = gen_length or own
    gen_length = gen_length or own
    config = decode_config(model, dec, gen_length=gen_length, block_length=block_length, cache=cache,
                           stop_at_eos=stop_at_eos, eos_early_stop=eos_early_stop, block_align=block_align,
                           sub_block_length=sub_block_length)
    check_limit(limit)
    seed = check_seed(seed)
    form = chat_form(chat) or False
    the_task = get_task(task, data_dir=data_dir)
    the_task.examples("test", 1)  # read the data now: a missing dataset fails before the model loads
    if not hasattr(model, "tokenizer"):  # a loaded model's is checked by evaluate_cell (nothing loads then)
        from ..runtime.checkpoints import require_tokenizer

        require_tokenizer(str(model))
    lm = load(model, dtype=dtype, device=device)
    cell = evaluate_cell(lm, the_task, dec, config, limit=limit, progress=progress, chat=form, on_sample=on_sample,
                         seed=seed, traces=bool(traces), auxiliary=attach_auxiliary(lm, dec))
    return evaluation(cell)


def sample_json(result: SampleResult) -> str:
    """One line of `ripple eval --samples-out`."""
    return json.dumps(result.__dict__)
