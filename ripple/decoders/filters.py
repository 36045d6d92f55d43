"""Learned filters: the small networks a learned decoder (`learn2pd`) asks which masked positions of a
block may be committed now, their architectures by name, and the artifact they ship as.

A filter maps per-position features of one block, [N, B] (Learn2PD: the probability of the argmax
token at each of the block's B positions), to one logit per position, [N, B]; a position is accepted
where sigmoid(logit) > threshold. Architectures are registered by name: each says which features it
reads and whether it has a fixed block length (`learn2pd`: Learn2PD's MLP takes exactly B inputs) or
none (`ripple`: a width-free convolution over per-position features [N, B, F] from
decoders/features.py, its neighbours read by the kernel, `block_length` None).

The artifact is a directory:

    DIR/model.safetensors   the state dict, float32 (metadata: architecture, block_length, features, model)
    DIR/card.json           the `FilterCard`: what it is, what it was trained on, how, and how well it did

`load_filter` also takes a bare `.safetensors` file: its card is then the sibling `card.json` (for a
`model.safetensors`), else its own metadata, else inferred from the tensor shapes (a state dict with
`linear1.weight` [2B, B] ... is Learn2PD's filter for block length B: the golden files'
filter_block16.safetensors), with the model named by a sibling `<stem>.json` when it has one
({"model": {"name", "sha256"}}, as the golden cards do). Every refusal is one line (RippleError).
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from ..errors import RippleError
from ..lazy import torch

WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "card.json"
CARD_FORMAT = "ripple-filter/1"
NO_FILTER = "none"  # `filter=none`: no filter (Learn2PD without f_theta is LLaDA's `generate`)


# ---------------------------------------------------------------------------- architectures
@dataclass(frozen=True)
class Architecture:
    """A filter network by name: what it reads and how it is built and recognised."""

    name: str
    features: tuple[str, ...]  # per-position inputs, in the order of the feature axis
    fixed_width: bool  # takes exactly block_length positions (else any block length: block_length None)
    build: Callable[[int | None], Any]  # block_length -> a fresh torch.nn.Module (float32)
    # block_length from a state dict's shapes (None for a width-free filter); raises KeyError/ValueError if
    # the state dict is not of this architecture
    infer_block_length: Callable[[dict], int | None]
    doc: str = ""
    # the build options a state dict implies (a width-free filter's feature count, hidden size, window)
    options: Callable[[dict], dict] = lambda state: {}


_ARCHITECTURES: dict[str, Architecture] = {}


def enter(table: dict[str, Any], name: str, item: Any, what: str) -> Any:
    """Register `item` under `name` in a small registry (filter architectures here, training recipes in
    ripple/platform/training/learn.py): a name given twice is a programming error."""
    if name in table:
        raise ValueError(f"{what} {name!r} registered twice")
    table[name] = item
    return item


def lookup(table: dict[str, Any], name: str, what: str) -> Any:
    """`table[name]`, or one line naming the unknown `what`, the closest name and the accepted ones."""
    if name not in table:
        close = difflib.get_close_matches(name, list(table), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RippleError(f"unknown {what} {name!r}{hint}; accepted: {', '.join(sorted(table))}")
    return table[name]


def register_architecture(arch: Architecture) -> Architecture:
    return enter(_ARCHITECTURES, arch.name, arch, "filter architecture")


def architectures() -> list[str]:
    return sorted(_ARCHITECTURES)


def get_architecture(name: str) -> Architecture:
    return lookup(_ARCHITECTURES, name, "filter architecture")


@lru_cache(maxsize=None)
def _learn2pd_class() -> type:
    """Learn2PD's `LogisticRegression(B)` (the paper's 2-layer MLP; its model/small_model.py is not
    public, golden README): built on first use so that importing decoders costs no torch import."""

    class Learn2PDFilter(torch.nn.Module):
        """linear1 [2B, B] -> ReLU -> linear2 [B, 2B]: a block's B confidences -> B logits."""

        def __init__(self, block_length: int):
            super().__init__()
            self.block_length = block_length
            self.linear1 = torch.nn.Linear(block_length, 2 * block_length)
            self.linear2 = torch.nn.Linear(2 * block_length, block_length)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # [N, B] float32 -> [N, B] logits
            return self.linear2(torch.relu(self.linear1(x)))

    return Learn2PDFilter


def _build_learn2pd(block_length: int | None):
    if not block_length or block_length < 1:
        raise RippleError("the learn2pd filter needs a block length (it takes exactly block_length inputs)")
    return _learn2pd_class()(block_length)


def _infer_learn2pd(state: dict) -> int:
    w1, w2 = state["linear1.weight"], state["linear2.weight"]  # [2B, B], [B, 2B]
    b = int(w1.shape[1])
    if tuple(w1.shape) != (2 * b, b) or tuple(w2.shape) != (b, 2 * b):
        raise ValueError(f"linear1.weight {tuple(w1.shape)} and linear2.weight {tuple(w2.shape)} are not [2B, B] "
                         "and [B, 2B]")
    return b


LEARN2PD = register_architecture(Architecture(
    name="learn2pd", features=("confidence",), fixed_width=True, build=_build_learn2pd,
    infer_block_length=_infer_learn2pd,
    doc="Learn2PD's f_theta: Linear(B, 2B), ReLU, Linear(2B, B) over the block's argmax probabilities"))


@lru_cache(maxsize=None)
def _ripple_class() -> type:
    """Ripple's width-free filter, built on first use (no torch import when decoders are imported)."""

    class RippleFilter(torch.nn.Module):
        """Per-position features [N, B, F] -> logits [N, B] at any block length B: a convolution over a
        window of 2w+1 positions (the neighbours, zero-padded at the block's edges), ReLU, a per-position
        layer, ReLU, a per-position logit."""

        def __init__(self, features: int, hidden: int, window: int):
            super().__init__()
            self.conv = torch.nn.Conv1d(features, hidden, 2 * window + 1, padding=window)
            self.mix = torch.nn.Conv1d(hidden, hidden, 1)
            self.out = torch.nn.Conv1d(hidden, 1, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # [N, B, F] float32 -> [N, B] logits
            h = torch.relu(self.conv(x.transpose(1, 2)))  # [N, H, B]
            h = torch.relu(self.mix(h))  # [N, H, B]
            return self.out(h).squeeze(1)  # [N, B]

    return RippleFilter


RIPPLE_FEATURES = ("confidence", "margin", "entropy", "is_committed", "masks_left", "step", "position", "left_masked",
                   "left_min_confidence")


def _build_ripple(block_length: int | None, features: int = len(RIPPLE_FEATURES), hidden: int = 32,
                  window: int = 2):
    return _ripple_class()(features, hidden, window)


def _ripple_options(state: dict) -> dict:
    w, mix, out = state["conv.weight"], state["mix.weight"], state["out.weight"]  # [H, F, 2w+1], [H, H, 1], [1, H, 1]
    hidden, features, kernel = (int(d) for d in w.shape)
    if kernel % 2 != 1 or tuple(mix.shape) != (hidden, hidden, 1) or tuple(out.shape) != (1, hidden, 1):
        raise ValueError(f"conv.weight {tuple(w.shape)}, mix.weight {tuple(mix.shape)} and out.weight "
                         f"{tuple(out.shape)} are not [H, F, 2w+1], [H, H, 1] and [1, H, 1]")
    return {"features": features, "hidden": hidden, "window": kernel // 2}


def _infer_ripple(state: dict) -> None:
    _ripple_options(state)
    return None


RIPPLE = register_architecture(Architecture(
    name="ripple", features=RIPPLE_FEATURES, fixed_width=False, build=_build_ripple, infer_block_length=_infer_ripple,
    options=_ripple_options,
    doc="Ripple's width-free filter: Conv1d over a window of 2w+1 positions of per-position features "
        "(decoders/features.py), ReLU, Conv1d 1x1, ReLU, Conv1d 1x1 -> one logit per position"))


def build_filter(architecture: str, block_length: int | None, **options):
    """A fresh filter module of `architecture` for `block_length` (None for a width-free one), float32;
    `options` are the architecture's own (ripple: features, hidden, window)."""
    arch = get_architecture(architecture)
    return arch.build(block_length if arch.fixed_width else None, **options)


# ---------------------------------------------------------------------------- the card
@dataclass(frozen=True)
class FilterCard:
    """What a filter is and where it came from; card.json beside its weights."""

    architecture: str
    block_length: int | None  # the block length it takes (None: any, a width-free filter)
    features: tuple[str, ...]
    model: str = ""  # the model whose decoding made its training data (name or path)
    model_sha256: str = ""  # that model's weights sha256 (empty: unknown, then any model is accepted)
    weights_sha256: str = ""  # sha256 of model.safetensors as saved (filled in by `save_filter`)
    task: str = ""
    split: str = ""
    prompts: int = 0  # prompts labelled
    records: int = 0  # training records (one per labelling forward)
    recipe: str = ""  # the recipe that trained it (`ripple learn train --recipe`)
    seeds: tuple[int, ...] = ()
    epochs: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)  # held-out metrics (e.g. test accuracy, false positives)
    settings: dict[str, Any] = field(default_factory=dict)  # the labelling run's gen_length, block_length, steps...
    source: str = ""  # how the card was made when not saved by Ripple: "inferred from tensor shapes", ...

    def __post_init__(self):
        object.__setattr__(self, "features", tuple(self.features))
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))

    def to_json(self) -> str:
        data = {"format": CARD_FORMAT, **dataclasses.asdict(self)}
        data["features"], data["seeds"] = list(self.features), list(self.seeds)
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "FilterCard":
        """The card of `to_json` (unknown keys are refused: a card of another format is not guessed at)."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != CARD_FORMAT:
            found = data.get("format") if isinstance(data, dict) else None
            raise ValueError(f"not a {CARD_FORMAT} card (its format is {found!r})")
        data = {k: v for k, v in data.items() if k != "format"}
        known = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise ValueError(f"unknown card keys {', '.join(extra)}")
        return cls(**data)


@dataclass(frozen=True)
class LoadedFilter:
    """A filter ready to run: the module (eval mode, float32), its card and its weights file's sha256."""

    module: Any
    card: FilterCard
    sha256: str
    path: str


# ---------------------------------------------------------------------------- save and load
def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_filter(directory: str | os.PathLike, module, card: FilterCard) -> FilterCard:
    """Write DIR/model.safetensors (float32) and DIR/card.json; return the card as written (with the
    weights' sha256). The weights file carries the architecture in its metadata, so it is self-describing
    even when copied without its card."""
    from safetensors.torch import save_file

    get_architecture(card.architecture)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in module.state_dict().items()}
    meta = {"format": CARD_FORMAT, "architecture": card.architecture,
            "block_length": "" if card.block_length is None else str(card.block_length),
            "features": ",".join(card.features), "model": card.model, "model_sha256": card.model_sha256}
    weights = out / WEIGHTS_FILE
    tmp = out / f".{WEIGHTS_FILE}.tmp"
    save_file(state, str(tmp), metadata=meta)
    _sort_header(tmp)
    os.replace(tmp, weights)
    card = dataclasses.replace(card, weights_sha256=file_sha256(weights))
    tmp = out / f".{CARD_FILE}.tmp"
    tmp.write_text(card.to_json())
    os.replace(tmp, out / CARD_FILE)
    return card


def _sort_header(path: Path) -> None:
    """Rewrite a safetensors file's JSON header with its keys sorted, in place and at the same length:
    safetensors writes the metadata map in no fixed order, so the same filter trained twice would get
    another sha256, and with it another cell id."""
    with open(path, "r+b") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = fh.read(n)
        text = json.dumps(json.loads(header), separators=(",", ":"), sort_keys=True).encode()
        if len(text) > n:  # never: the same keys and values, compact
            raise RippleError(f"{path}: cannot rewrite the safetensors header in place")
        fh.seek(8)
        fh.write(text + b" " * (n - len(text)))  # the format pads its header with spaces


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _read_card(weights: Path, metadata: dict[str, str], state: dict) -> FilterCard:
    """The card for `weights`: card.json beside a model.safetensors, else the file's own metadata, else
    Learn2PD's architecture inferred from the shapes (named by a sibling `<stem>.json` when present)."""
    card_path = weights.parent / CARD_FILE
    if weights.name == WEIGHTS_FILE and card_path.is_file():
        try:
            return FilterCard.from_json(card_path.read_text())
        except (OSError, ValueError, TypeError) as exc:
            raise RippleError(f"filter card {str(card_path)!r} is unreadable ({_one_line(exc)}); expected the "
                              f"card.json `ripple learn train` writes") from None
    if metadata.get("format") == CARD_FORMAT and metadata.get("architecture"):
        width = metadata.get("block_length") or ""
        return FilterCard(metadata["architecture"], int(width) if width else None,
                          tuple(f for f in metadata.get("features", "").split(",") if f),
                          model=metadata.get("model", ""), model_sha256=metadata.get("model_sha256", ""),
                          source="safetensors metadata (no card.json)")
    try:
        block = LEARN2PD.infer_block_length(state)
    except (KeyError, ValueError) as exc:
        raise RippleError(f"filter {str(weights)!r} has no card and is no learn2pd filter ({_one_line(exc)}); "
                          f"expected a directory with {WEIGHTS_FILE} and {CARD_FILE}") from None
    model, sha = "", ""
    sibling = weights.with_suffix(".json")
    if sibling.is_file():  # the golden cards: {"model": {"name": ..., "sha256": ...}, ...}
        try:
            named = json.loads(sibling.read_text()).get("model") or {}
            model, sha = str(named.get("name", "")), str(named.get("sha256", ""))
        except (OSError, ValueError, AttributeError):
            pass  # not a card of that form: the filter is simply of an unknown model
    return FilterCard("learn2pd", block, LEARN2PD.features, model=model, model_sha256=sha,
                      source="inferred from tensor shapes")


def _weights_path(path: str | os.PathLike) -> Path:
    where = Path(path).expanduser()
    if where.is_dir():
        where = where / WEIGHTS_FILE
    if not where.is_file():
        raise RippleError(f"filter {str(path)!r} does not exist (a directory with {WEIGHTS_FILE} and {CARD_FILE}, or "
                          f"a .safetensors file); train one with `ripple learn label` and `ripple learn train`, or "
                          f"pass filter=none")
    return where


def read_filter(path: str | os.PathLike) -> LoadedFilter:
    """Load a filter (a directory or a .safetensors file) without checking it against a run."""
    from safetensors import safe_open

    weights = _weights_path(path)
    try:
        with safe_open(str(weights), framework="pt") as fh:
            metadata = dict(fh.metadata() or {})
            state = {k: fh.get_tensor(k) for k in fh.keys()}
    except Exception as exc:  # safetensors raises its own error types for a damaged header or body
        raise RippleError(f"filter {str(path)!r} is unreadable ({_one_line(exc)}); expected a safetensors file "
                          f"written by `ripple learn train`") from None
    card = _read_card(weights, metadata, state)
    arch = _ARCHITECTURES.get(card.architecture)
    if arch is None:
        raise RippleError(f"filter {str(path)!r} has architecture {card.architecture!r}, which this Ripple does not "
                          f"know; accepted: {', '.join(architectures())}")
    try:
        shape_block = arch.infer_block_length(state)
        if shape_block != (card.block_length if arch.fixed_width else None):
            raise ValueError(f"its card says block_length {card.block_length}, its tensors {shape_block}")
        options = arch.options(state)
        if "features" in options and options["features"] != len(card.features):
            raise ValueError(f"its card names {len(card.features)} features, its tensors read {options['features']}")
        module = arch.build(card.block_length if arch.fixed_width else None, **options)
        module.load_state_dict({k: v.to(torch.float32) for k, v in state.items()}, strict=True)
    except (KeyError, ValueError, RuntimeError) as exc:
        raise RippleError(f"filter {str(path)!r} does not match architecture {arch.name!r} "
                          f"({_one_line(exc)})") from None
    module.eval()
    module.requires_grad_(False)
    return LoadedFilter(module, card, file_sha256(weights), str(weights))


@lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int, size: int) -> LoadedFilter:
    return read_filter(path)


def cached_filter(path: str | os.PathLike) -> LoadedFilter:
    """`read_filter` once per process (a worker) and file version: a rewritten file is read anew."""
    weights = _weights_path(path)
    st = weights.stat()
    return _cached(str(Path(path).expanduser().resolve()), st.st_mtime_ns, st.st_size)


def check_filter(loaded: LoadedFilter, block_length: int, weights_sha256: str | None = None) -> None:
    """Refuse, in one line, a filter that cannot serve this run: another block length (fixed-width
    architectures) or another model (the card's model sha256 against the run's weights digest, compared
    on their common prefix; a card without one is accepted)."""
    card = loaded.card
    if get_architecture(card.architecture).fixed_width and card.block_length != block_length:
        raise RippleError(f"filter {loaded.path!r} takes blocks of {card.block_length} positions; this run decodes "
                          f"blocks of {block_length}: train one for block_length {block_length} with `ripple learn`, "
                          f"or pass filter=none")
    if card.model_sha256 and weights_sha256:
        n = min(len(card.model_sha256), len(weights_sha256))
        if card.model_sha256[:n].lower() != weights_sha256[:n].lower():
            named = card.model or "unnamed"
            raise RippleError(f"filter {loaded.path!r} was trained on another model ({named}, weights "
                              f"{card.model_sha256[:12]}); this run's weights are {weights_sha256[:12]}: train one "
                              f"for this model with `ripple learn`")


def load_filter(path: str | os.PathLike, block_length: int | None = None,
                weights_sha256: str | None = None) -> LoadedFilter:
    """A filter (directory or .safetensors file), read once per process, checked against the run when
    `block_length` is given. Returns the module, its card and its weights file's sha256."""
    loaded = cached_filter(path)
    if block_length is not None:
        check_filter(loaded, block_length, weights_sha256)
    return loaded
