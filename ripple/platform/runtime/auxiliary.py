"""Second models beside the dLLM (issue 58; APD's verifier): load what a decoder's configuration names,
once per process, and refuse one that cannot serve the dLLM.

A decoder declares the hyperparameter that names such a model and its kind (`params.auxiliary`, e.g. APD's
`verifier`, a causal LM); nothing here knows a decoder by name. `AuxiliaryModels` belongs to whoever holds
the dLLM (a grid worker for its life, a `ripple.generate` call for its own): it resolves the name (a
folder, a hub id or an embedded name), takes the weights' digest (the same `weights_digest` the dLLM's
records carry, memoised on the weight files' size and mtime, so a later batch costs a stat, not a read),
loads the model on the dLLM's device and dtype once per (resolved folder, digest), and hands it to the
decoder (`Scheduler.attach_auxiliary`). The digests it returns go on every record the decoder writes
(`SampleRecord.aux_weights`): a cell's results are those of its dLLM's weights and its verifier's.

Fit, checked from config and tokenizer files before the second model's weights load: the model is of the
declared kind (a causal LM), its output rows cover every id the dLLM's tokenizer defines (Qwen2.5-0.5B's
151,936 rows cover Dream's 151,667 ids, though Dream's config pads its head to 152,064), and where both
have tokenizers, every id both define spells the same token.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ...errors import RippleError
from .loading import (DTYPES, LoadedModel, load_causal, load_tokenizer, read_config, resolve_model_dir,
                      weight_files, weights_digest)
from .models import get_family

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

    def attach(self, decoder) -> dict[str, str]:
        """Hand `decoder` every second model its configuration names (hyperparameter -> model), each refused
        in one line naming the decoder and hyperparameter when it cannot serve; returns hyperparameter ->
        weights digest (empty for a decoder without one)."""
        kinds = decoder.Params.auxiliary_fields()
        got: dict[str, Auxiliary] = {}
        for hp, name in decoder.params.auxiliary_models().items():
            try:
                got[hp] = self.get(name, kinds[hp])
            except RippleError as exc:
                raise RippleError(f"decoder {decoder.name!r} hyperparameter {hp}={name!r}: {exc}") from None
        decoder.attach_auxiliary({hp: a.lm for hp, a in got.items()})
        return {hp: a.digest for hp, a in got.items()}


def digests_json(digests: dict[str, str]) -> str | None:
    """What a record stores: JSON hyperparameter -> digest, None without a second model."""
    return json.dumps(digests, sort_keys=True) if digests else None
