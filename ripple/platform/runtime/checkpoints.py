"""What a checkpoint folder says before any weights load, without torch: where it is (a directory, an
embedded name or a hub id), its config.json and family, its weight files and their digest, whether it has a
tokenizer. A driver validating a spec reads these; `loading.py` (which imports torch) loads the model."""
from __future__ import annotations

import json
from pathlib import Path

from ...errors import RippleError
from .models import get_family
from .models.family import Family, diffusion_families

_ASSETS = Path(__file__).resolve().parents[2] / "assets"  # ripple/assets
EMBEDDED = {name: _ASSETS / name for name in (
    "ripple-tiny", "ripple-tiny-bd", "ripple-tiny-lines", "ripple-tiny-ar")}  # ripple-tiny-ar: a causal LM (load_causal)

def resolve_model_dir(name: str) -> Path:
    """A local directory, an embedded model name, or a hub id through the hub cache."""
    if name in EMBEDDED:
        path = EMBEDDED[name]
        if not (path / "config.json").exists():
            raise RippleError(f"embedded model {name!r} is not installed at {path}")
        return path
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise RippleError(f"model path {name!r} is a file; give the checkpoint directory")
        return path
    if name.count("/") == 1 and not name.startswith((".", "/")):
        try:
            from huggingface_hub import snapshot_download

            local = snapshot_download(
                repo_id=name,
                allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"],
            )
        except Exception as exc:  # the hub raises many types; one line is what a user needs
            raise RippleError(
                f"model {name!r} is neither a local directory nor reachable on the Hugging Face hub "
                f"({type(exc).__name__}); give a checkpoint directory or an embedded name: {', '.join(EMBEDDED)}"
            ) from None
        return Path(local)
    raise RippleError(
        f"model {name!r} not found: give a checkpoint directory, a hub id (org/name) "
        f"or an embedded name: {', '.join(EMBEDDED)}"
    )


def read_config(path: Path) -> dict:
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise RippleError(f"checkpoint {path} has no config.json")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RippleError(f"checkpoint {path}: config.json is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})") from None
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise RippleError(f"checkpoint {path}: config.json has no model_type")
    return cfg


def dllm_family(name: str, cfg: dict) -> Family:
    """The family of checkpoint `name`'s config.json, refused in one line when it is a causal LM: decoders
    decode diffusion LMs only (a causal LM serves as a verifier, `load_causal`)."""
    family = get_family(cfg["model_type"])
    if family.causal:
        raise RippleError(f"model {name!r} is a causal LM ({family.name}), not a diffusion LM: no decoder decodes "
                          f"it (it serves as a verifier); diffusion model_types: {', '.join(diffusion_families())}")
    return family


def weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise RippleError(f"checkpoint {path}: model.safetensors.index.json is corrupt (no weight_map)") from None
        files = [path / f for f in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise RippleError(f"checkpoint {path}: shard(s) listed in the index are missing: {', '.join(missing)}")
        return files
    single = path / "model.safetensors"
    if single.exists():
        return [single]
    found = sorted(path.glob("model*.safetensors"))
    if found:
        return found
    raise RippleError(f"checkpoint {path} has no *.safetensors weights (only safetensors checkpoints load)")


def weights_digest(path: Path) -> str:
    """First 12 hex digits of the sha256 over a checkpoint's weight files, in name order: what
    stored samples and the batch-equivalence report name a model's weights by, so results of a
    retrained model never pass for the old one's. Reads every byte (about 20 s for 16 GB)."""
    return weights_sha256(path)[:12]


def weights_sha256(path: Path) -> str:
    """The sha256 over a checkpoint's weight files in name order (for a single file, that file's own
    sha256: what a learned filter's card names its model by)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(weight_files(path)):
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def local_weights_digest(name: str) -> str | None:
    """`weights_digest` of an embedded model or a local checkpoint directory; None for a hub id,
    which only workers resolve (the driver does not download it)."""
    if name in EMBEDDED:
        return weights_digest(resolve_model_dir(name))
    path = Path(name).expanduser()
    return weights_digest(path) if path.is_dir() else None

def has_tokenizer(path: Path) -> bool:
    """Whether checkpoint `path` has tokenizer files (`load_tokenizer` returns None without them)."""
    return any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json"))


TASKS_NEED_A_TOKENIZER = "tasks need one to build prompts"


def require_tokenizer(name: str, why: str = TASKS_NEED_A_TOKENIZER) -> None:
    """One line, before any weights load, when checkpoint `name` has no tokenizer files (`why` a run needs
    them): a refusal after the load would have cost the load."""
    if not has_tokenizer(resolve_model_dir(name)):
        raise RippleError(f"model {name!r} has no tokenizer; {why}")

def block_aligned(name: str, gen_length: int, block_length: int) -> bool:
    """Whether a gen_length that is no multiple of block_length is fine for this model: a block-diffusion
    family's, or a uniform-noise family's, which decodes whole canvases (read from config.json before any
    weights load; only asked when they do not divide)."""
    if block_length <= 0 or gen_length % block_length == 0:
        return False
    family = dllm_family(name, read_config(resolve_model_dir(name)))
    return family.block_causal or family.noise == "uniform"


def config_noise(name: str) -> tuple[str, str]:
    """(family name, its noise) from config.json's model_type, read before any weights load."""
    family = dllm_family(name, read_config(resolve_model_dir(name)))
    return family.name, family.noise


def generation_defaults(name: str) -> dict:
    """The model's generation_config.json ({} when it has none), read before any weights load."""
    path = resolve_model_dir(name) / "generation_config.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        raise RippleError(f"checkpoint {path.parent}: generation_config.json is not valid JSON") from None


def config_mask_id(name: str) -> int | None:
    """The mask id config.json declares, read before any weights load (None: only the tokenizer names it)."""
    mask_id = read_config(resolve_model_dir(name)).get("mask_token_id")
    return None if mask_id is None else int(mask_id)
