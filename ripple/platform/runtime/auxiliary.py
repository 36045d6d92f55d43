"""Models a decoder needs beside the dLLM (a draft-and-verify decoder's verifier, issue 58): a seam,
so that a decoder with its own model is an addition to the engine, never a branch on its name.

- The decoder declares them per configuration, by role: `Scheduler.auxiliary_models()` returns
  {role: reference} (a folder, a hub id or an embedded name, from its hyperparameters); {} for
  every decoder that needs none, which then costs nothing.
- Whoever loads the dLLM loads each referenced model once (per worker and reference, not per
  sample) and hands it to the engine: `Engine(..., auxiliary={reference: model})`.
- The engine refuses, in one line before any forward, a decoder whose model it does not hold, and
  hands the decoder its models by role: `RunShape.models` in `prepare` (where the decoder refuses a
  model that cannot serve it) and `BlockState.models` in its steps.
- A model handed to a step is wrapped in `Counted`: each call is one forward of that role for the
  state's sample, reported apart from the dLLM's forwards (`SampleOutput.auxiliary_nfe`), never in `nfe`.

Loading (issue 58's "second model on the worker"): `AuxiliaryModels` belongs to whoever holds the dLLM
(a grid worker for its life, a `ripple.generate` call for its own). For each model a configuration
names it resolves the reference (a folder, a hub id or an embedded name), takes the weights' digest
(the `weights_digest` the dLLM's records carry, memoised on the weight files' size and mtime, so a later
batch costs a stat, not a read), loads the model on the dLLM's device and dtype once per (resolved
folder, digest), and puts it in the engine by reference. The digests go on every record the decoder
writes (`SampleRecord.aux_weights`): a cell's results are those of its dLLM's weights and its
verifier's. The kind of model a role needs is declared with the hyperparameter that names it
(`params.auxiliary`; a causal LM).

Fit, checked from config and tokenizer files before the second model's weights load: the model is of
the declared kind, its output rows cover every id the dLLM's tokenizer defines (Qwen2.5-0.5B's 151,936
rows cover Dream's 151,667 ids, though Dream's config pads its head to 152,064), and where both have
tokenizers, every id both define spells the same token.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ...decoders.base import Scheduler
from ...errors import RippleError
from .loading import (DTYPES, LoadedModel, load_causal, load_tokenizer, read_config, resolve_model_dir,
                      weight_files, weights_digest)
from .models import get_family


def models_for(decoder: Scheduler, loaded: Mapping[str, Any]) -> dict[str, Any]:
    """The models `decoder` declares, by role, from `loaded` (by reference); one line naming the
    first one not loaded."""
    out = {}
    for role, reference in decoder.auxiliary_models().items():
        if reference not in loaded:
            held = ", ".join(sorted(loaded)) or "none"
            raise RippleError(f"decoder {decoder.name!r} needs its {role} model {reference!r} loaded beside the "
                              f"model; loaded: {held}")
        out[role] = loaded[reference]
    return out


class Counted:
    """A model handed to one sample's steps: every call counts one forward in `counts[row]`; every
    other attribute is the model's. A causal LM's step (`causal_step`) is offered here, so a decoder,
    which may not import the platform, runs the same causal forward as everything else."""

    def __init__(self, model: Any, counts: list[int], row: int):
        self.model, self.counts, self.row = model, counts, row

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.counts[self.row] += 1
        return self.model(*args, **kwargs)

    def causal_step(self, ids: Any, past: Any = None) -> Any:
        """`causal_forward` of this (causal) model, counted: `CausalOutput(logits [B, L, V] float32, kv)`."""
        from .causal import causal_forward

        return causal_forward(self, ids, past=past)


# kind (`params.AUXILIARY_KINDS`) -> how a model of that kind loads: (name, dtype, device) -> LoadedModel
LOADERS: dict[str, Callable[..., LoadedModel]] = {"causal_lm": lambda name, dtype, device: load_causal(name, dtype, device)}
KIND_TEXT = {"causal_lm": "a causal LM"}


@dataclass(frozen=True)
class Auxiliary:
    """A loaded second model and what identifies it."""

    name: str  # as the configuration names it
    kind: str
    path: Path  # the resolved checkpoint folder
    digest: str  # weights_digest of its weight files
    lm: LoadedModel


def _vocab_size(cfg: dict) -> int | None:
    """Output rows of a checkpoint (config.json's vocab_size, or its family's reading of it)."""
    if isinstance(cfg.get("vocab_size"), int):
        return cfg["vocab_size"]
    try:
        return int(get_family(cfg["model_type"]).to_config(cfg).vocab_size)
    except (AttributeError, TypeError, RippleError):
        return None


def check_fit(dllm: Path | str, aux: Path | str, kind: str, dllm_tokenizer: Any = None, aux_name: str | None = None
              ) -> None:
    """Refuse, in one line, a second model (checkpoint folder `aux`) that cannot serve the dLLM (folder `dllm`):
    not of `kind`, output rows short of the dLLM's ids, or a tokenizer spelling a shared id otherwise.
    Reads config and tokenizer files only. `dllm_tokenizer`: the dLLM's, when already loaded."""
    dllm, aux = Path(dllm), Path(aux)
    name = aux_name or str(aux)
    acfg, dcfg = read_config(aux), read_config(dllm)
    family = get_family(acfg["model_type"])
    if kind == "causal_lm" and not family.causal:
        from .models.family import causal_families

        raise RippleError(f"{name!r} is a {family.name} checkpoint, not {KIND_TEXT[kind]}; accepted model_types: "
                          f"{', '.join(causal_families())}")
    dtok = dllm_tokenizer if dllm_tokenizer is not None else load_tokenizer(dllm)
    needed = len(dtok) if dtok is not None else _vocab_size(dcfg)
    rows = _vocab_size(acfg)
    if needed is None or rows is None:
        where = name if rows is None else str(dllm)
        raise RippleError(f"{name!r}: {where}'s config.json gives no vocab_size, so the vocabularies cannot be compared")
    if rows < needed:
        raise RippleError(f"{name!r} scores {rows} ids but the dLLM's vocabulary has {needed}: it must score every "
                          "id the dLLM writes (the same tokenizer)")
    atok = load_tokenizer(aux)
    if dtok is not None and atok is not None:
        spelled = {i: t for t, i in atok.get_vocab().items()}
        for token, i in sorted(dtok.get_vocab().items(), key=lambda kv: kv[1]):
            if i in spelled and spelled[i] != token:
                raise RippleError(f"{name!r} spells id {i} {spelled[i]!r} where the dLLM spells {token!r}: it must "
                                  "share the dLLM's tokenizer")


def _stamp(path: Path) -> tuple:
    """What changes when a checkpoint's weights do: each weight file's name, size and mtime."""
    return (str(path.resolve()),) + tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in weight_files(path))


class AuxiliaryModels:
    """The second models beside one loaded dLLM, each loaded once per (resolved folder, weights digest).

    `loader(name, dtype, device) -> LoadedModel` replaces the kind's loader (tests)."""

    def __init__(self, dllm: LoadedModel, loader: Callable[..., LoadedModel] | None = None):
        self.dllm = dllm
        self._loader = loader
        self._digests: dict[tuple, str] = {}
        self._models: dict[tuple[str, str], LoadedModel] = {}
        self._fit: set[tuple[str, str]] = set()  # (folder, kind) already checked against the dLLM
        self.loads = 0  # weights loads done (the cache's misses)

    def digest(self, path: Path) -> str:
        stamp = _stamp(path)
        if stamp not in self._digests:
            self._digests[stamp] = weights_digest(path)
        return self._digests[stamp]

    def get(self, name: str, kind: str) -> Auxiliary:
        """The model `name` of `kind`: checked against the dLLM, loaded on its device and dtype, or the one
        loaded before from the same folder and weights."""
        path = resolve_model_dir(name)
        if (str(path), kind) not in self._fit:
            check_fit(self.dllm.path, path, kind, self.dllm.tokenizer, name)
            self._fit.add((str(path), kind))
        digest = self.digest(path)
        key = (str(path.resolve()), digest)
        if key not in self._models:
            dtype = next(k for k, v in DTYPES.items() if v == self.dllm.dtype)
            load = self._loader or LOADERS[kind]
            self._models[key] = load(str(path), dtype, str(self.dllm.device))
            self.loads += 1
        return Auxiliary(name, kind, path, digest, self._models[key])

    def attach(self, decoder: Scheduler, held: dict[str, Any]) -> dict[str, str]:
        """Put every model `decoder`'s configuration names (`auxiliary_models()`, {role: reference}) in
        `held` (an engine's `auxiliary`) by reference, as its module (the engine counts calls of it; a
        causal LM's next-token logits: ripple/platform/runtime/causal.py), each refused in one line
        naming the decoder and role when it cannot serve; returns role -> weights digest (empty for a
        decoder without one). A role's kind is the one its hyperparameter declares (`params.auxiliary`)."""
        kinds = decoder.Params.auxiliary_fields()
        digests: dict[str, str] = {}
        for role, name in decoder.auxiliary_models().items():
            if role not in kinds:
                raise RippleError(f"decoder {decoder.name!r} names a {role} model {name!r} but declares no hyperparameter "
                                  f"{role!r} with params.auxiliary (its kind of model); declared: "
                                  f"{', '.join(kinds) or 'none'}")
            try:
                got = self.get(name, kinds[role])
            except RippleError as exc:
                raise RippleError(f"decoder {decoder.name!r} hyperparameter {role}={name!r}: {exc}") from None
            held[name] = got.lm.model
            digests[role] = got.digest
        return digests


def digests_json(digests: dict[str, str]) -> str | None:
    """What a record stores: JSON role (the hyperparameter) -> digest, None without a second model."""
    return json.dumps(digests, sort_keys=True) if digests else None
