"""Grid specs: YAML -> a validated `GridSpec` -> the `Cell`s of the grid.

A spec lists models x tasks x decoders (with hyperparameters) x gen_lengths x
block_lengths x caches x seeds. Everything is validated before any worker starts,
and every problem is reported on one line naming the spec, the key and the accepted
values, so a typo never costs a cluster start-up. Shipped specs live in `grids/`.

Example (`ripple/platform/experiments/grids/demo.yaml` is another):

    models: [ripple-tiny]
    tasks: {arith: {limit: 50}, pyfunc: {limit: 20}}   # or a list of names plus `limit:`; a task may
                                                      # also set its own gen_lengths and block_lengths
    decoders:                                         # or `decoders: all`: every registered one
      - default
      - {name: rps, params: {lambda: [0.1, 0.2]}}       # a list expands into one cell per value
      - name: klass                                     # per-task settings override `params` there
        task_params: {arith: {tau: 0.6, kappa: 0.015}}
      - {name: apd, params: {verifier: ripple-tiny-ar}, caches: [sliding], block_lengths: [48]}  # its own axes
    gen_lengths: [48]
    block_lengths: [16]
    caches: [none, prefix]
    batch_size: 8                                       # samples of a cell per engine call (default 1)
    traces: true                                        # keep each sample's decode trace (default false)
"""
from __future__ import annotations

import difflib
import json
import hashlib
import itertools
import re
from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from ...decoders.registry import is_registered, label
from ...errors import RippleError
from .store import ADDED_COLUMNS, ADDED_SETTINGS, DecodeSettings, check_name, dumps

GRIDS_DIR = Path(__file__).resolve().parent / "grids"
TOP_KEYS = ("experiment", "description", "models", "tasks", "decoders", "gen_lengths", "block_lengths", "caches",
            "seeds", "limit", "split", "dtype", "chat", "stop_at_eos", "eos_early_stop", "block_align",
            "sub_block_length", "data_dir", "workers", "batch_size", "traces")
# a decoder entry's own `caches` and `block_lengths` replace the grid's for its cells
DECODER_KEYS = ("name", "params", "task_params", "models", "caches", "block_lengths")
TASK_KEYS = ("limit", "gen_lengths", "block_lengths", "if_data", "models")  # plus the task's own options (`Task.options`)
# `models` restricts a task to some of the spec's models (one grid over models trained on different tasks)
# a task's own lengths replace the spec's for its cells (ParallelBench: 32-token waiting lines, 64-token
# puzzles, each with the block equal to the response); they are cell settings, not task options
TASK_LENGTHS = ("gen_lengths", "block_lengths")
WORKER_KEYS = ("device", "count", "cpus", "gpus", "max_restarts")
WORKER_DEVICES = ("auto", "gpu", "cpu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True, kw_only=True)
class Cell(DecodeSettings):
    """One point of the grid. `cell_id` hashes every setting that can change a sample's result."""

    model: str
    task: str
    decoder: str
    params: tuple[tuple[str, Any], ...]  # every hyperparameter (defaults filled in), sorted by name
    limit: int | None  # samples per cell: the first `limit` examples (not part of the id)
    # a decoder class defined in the caller's code, never registered (`decoder` is then `local:NAME`);
    # workers receive it pickled by value (Ray's cloudpickle)
    local: type | None = None

    @property
    def decoder_class(self):
        """The Scheduler subclass this cell decodes with."""
        from ...decoders import get

        return self.local if self.local is not None else get(self.decoder)

    def make_decoder(self):
        """A fresh decoder with this cell's hyperparameters."""
        cls = self.decoder_class
        return cls(cls.Params.from_strings(cls.name, {k: str(v) for k, v in self.params}))

    def _known_params(self):
        """The decoder's Params class, or None for a stored decoder no longer registered."""
        from ...decoders import get, names

        if self.local is not None:
            return self.local.Params
        return get(self.decoder).Params if self.decoder in names() else None

    @property
    def settings(self) -> dict[str, Any]:
        return {"model": self.model, "task": self.task, "decoder": self.decoder, "params": dict(self.params),
                **self.decode_settings()}

    @cached_property
    def plugins(self) -> str | None:
        """JSON of the distributions and versions of a plugin decoder or task (ripple/plugins.py), or
        None for Ripple's own: a plugin's results are never confused with another version's."""
        from ...decoders.registry import local_source, source
        from ...tasks.base import task_source

        decoder = local_source(self.local) if self.local is not None else source(self.decoder)
        found = {kind: str(src) for kind, src in (("decoder", decoder), ("task", task_source(self.task)))
                 if src is not None}
        return dumps(found) if found else None

    @cached_property  # the grid's loops ask per sample; fields are frozen, so hash once per cell
    def cell_id(self) -> str:
        return hashlib.sha256(dumps(self.identity()).encode()).hexdigest()[:16]

    def identity(self) -> dict[str, Any]:
        """`settings` less what was added after stores existed, at the value that means "as before"
        (each added decode setting at the value `ADDED_COLUMNS` gives a record written before it,
        `hp(new=True)` hyperparameters at their defaults): old ids stay valid."""
        ident = self.settings
        if not self.chat:  # no template, no form
            ident["chat_form"] = ADDED_COLUMNS["chat_form"]
        for name in ADDED_SETTINGS:
            if ident[name] == ADDED_COLUMNS[name]:
                del ident[name]
        known = self._known_params()
        neutral = known.id_neutral() if known is not None else {}
        ident["params"] = {k: v for k, v in ident["params"].items() if k not in neutral or neutral[k] != v}
        if self.plugins is not None:  # built-in cells keep their ids
            ident["plugins"] = self.plugins
        if self.artifacts:  # cells of decoders that read no file keep their ids
            ident["artifacts"] = self.artifacts
        return ident

    @cached_property
    def artifacts(self) -> dict[str, str]:
        """{what: sha256} of the files this cell's decoder configuration reads (a learned filter,
        `Scheduler.artifacts`): in the cell id, so a changed file makes a new cell, as a changed checkpoint
        is refused by the store. A model's shipped file is found where its folder is local (an embedded
        name or a directory), not for a hub id."""
        from ...decoders.base import Scheduler

        cls = self.decoder_class if self._known_params() is not None else None
        if cls is None or getattr(cls.artifacts, "__func__", None) is Scheduler.artifacts.__func__:
            return {}
        from ..runtime.checkpoints import EMBEDDED

        path = EMBEDDED.get(self.model) or Path(self.model).expanduser()
        model_dir = str(path) if path.is_dir() else None
        return cls.artifacts(cls.Params.from_strings(cls.name, {k: str(v) for k, v in self.params}), model_dir)

    @property
    def params_json(self) -> str:
        return dumps(dict(self.params))

    def baseline_key(self) -> tuple:
        """Cells sharing this key are compared with the same Default cell (speedup)."""
        return (self.model, self.task, *self.decode_settings().values())

    def loose_key(self) -> tuple | None:
        """`baseline_key` without block length and cache, for a cell whose decoder has them of its own
        (`Scheduler.own_geometry`, APD), which is compared with the default and oracle cells this key finds
        when none shares its full key; None for the others."""
        known = self._known_params() is not None
        if not (known and self.decoder_class.own_geometry):
            return None
        return self.geometry_free_key()

    def geometry_free_key(self) -> tuple:
        """`baseline_key` without block length and cache."""
        settings = {k: v for k, v in self.decode_settings().items() if k not in ("block_length", "cache")}
        return (self.model, self.task, *settings.values())

    def label(self) -> str:
        """The decoder with its non-default hyperparameters, e.g. `rps(lambda=0.1)` (every stored
        hyperparameter for a decoder no longer registered: there are no defaults to compare with)."""
        known = self._known_params()
        defaults = known().to_dict() if known is not None else {}
        changed = [f"{k}={v}" for k, v in self.params if k not in defaults or defaults[k] != v]
        return f"{self.decoder}({', '.join(changed)})" if changed else self.decoder

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "Cell":
        """The cell a stored sample record belongs to (its `cell_id` is the record's)."""
        settings = {f.name: record[f.name] for f in fields(DecodeSettings)}
        params = tuple(sorted(json.loads(record["params"] or "{}").items()))
        return cls(model=record["model"], task=record["task"], decoder=record["decoder"], params=params, limit=None,
                   **settings)


@dataclass(frozen=True)
class WorkerSpec:
    """How many workers and what each owns: `gpus` GPUs per worker, or `cpus` CPUs on a CPU worker."""

    device: str = "auto"  # auto: GPU workers if the cluster has GPUs now; gpu: ask for them (autoscaling)
    count: int | None = None  # None: one per GPU (or per `cpus` CPUs on a CPU-only cluster)
    cpus: int = 1
    gpus: int = 1
    max_restarts: int = 2  # a killed worker restarts and its in-flight samples are retried this often


@dataclass(frozen=True)
class GridSpec:
    """A validated spec: its cells in spec order (models, tasks, decoders, lengths, caches, seeds)."""

    path: str
    experiment: str
    cells: tuple[Cell, ...]
    data_dir: str | None
    workers: WorkerSpec
    description: str = ""
    # samples of one cell a worker decodes in one engine call. Not part of any cell id: it changes
    # timing, never tokens or NFE (checked by `python -m ripple.bench --batch-equivalence`)
    batch_size: int = 1
    if_data: tuple[str, ...] = ()  # tasks run only where their data are found (`if_data: true`)
    left_out: tuple[str, ...] = ()  # those whose data were not found (`with_found_data`)
    # keep each sample's decode trace with its record (`traces: true`; `ripple trace` draws them, reports
    # count parallel failures from them). Not part of any cell id: it changes what is kept, not the tokens
    traces: bool = False

    def _per_task(self) -> list[str]:
        """One line per decoder whose settings differ between tasks: each task's values of the
        hyperparameters that differ (`task_params`)."""
        by: dict[str, dict[str, list[dict]]] = {}
        classes = {}
        for c in self.cells:
            settings = by.setdefault(c.decoder, {}).setdefault(c.task, [])
            classes[c.decoder] = c.decoder_class
            if dict(c.params) not in settings:
                settings.append(dict(c.params))
        lines = []
        for name, tasks in by.items():
            # the hyperparameters whose values are not the same for every task; tasks alike share a line
            keys = [k for k in classes[name].Params().to_dict()
                    if len({frozenset(p[k] for p in ps) for ps in tasks.values()}) > 1]
            per = {task: " | ".join(dict.fromkeys(" ".join(f"{k}={p[k]}" for k in keys) for p in ps))
                   for task, ps in tasks.items()}
            if len(set(per.values())) > 1:
                alike: dict[str, list[str]] = {}
                for task, text in per.items():
                    alike.setdefault(text, []).append(task)
                groups = "; ".join(", ".join(t) + " " + v for v, t in alike.items())
                lines.append(f"    {name} per task: {groups}")
        return lines

    def with_limit(self, limit: int | None) -> "GridSpec":
        """Cap the samples of every cell at `limit` (`ripple grid --limit`)."""
        if limit is None:
            return self
        if not isinstance(limit, int) or limit < 1:
            raise RippleError(f"--limit must be a positive number of samples per cell, got {limit}")
        cells = tuple(replace(c, limit=limit if c.limit is None else min(c.limit, limit)) for c in self.cells)
        return replace(self, cells=cells)

    def with_batch_size(self, batch_size: int | None) -> "GridSpec":
        """Decode up to `batch_size` samples of a cell per engine call (`ripple grid --batch-size`)."""
        if batch_size is None:
            return self
        return replace(self, batch_size=check_batch_size(batch_size, "--batch-size"))

    def with_data_dir(self, data_dir: str | None) -> "GridSpec":
        """Read benchmark data from `data_dir` (`ripple grid --data-dir`) instead of the spec's."""
        return self if data_dir is None else replace(self, data_dir=data_dir)

    def with_found_data(self) -> "GridSpec":
        """Leave out the cells of `if_data` tasks whose data are not found (ParallelBench's test files,
        which the user brings); the other cells keep their ids."""
        from ...tasks import get_task

        missing = tuple(t for t in self.if_data if not get_task(t, data_dir=self.data_dir).data_found())
        cells = tuple(c for c in self.cells if c.task not in missing)
        if not cells:
            raise RippleError(f"grid spec {self.path}: the data of every task are missing: {', '.join(missing)}; "
                              f"pass --data-dir DIR holding them")
        return replace(self, cells=cells, left_out=missing)

    def describe(self) -> str:
        """The plan in a few lines (`ripple grid --dry-run`)."""
        axes = {"models": "model", "tasks": "task", "decoders": "label", "gen_lengths": "gen_length",
                "block_lengths": "block_length", "caches": "cache", "seeds": "seed"}
        lines = [f"grid spec {self.path}: experiment {self.experiment}, {len(self.cells)} cells"]
        order = {name: i for i, name in enumerate(dict.fromkeys(c.decoder for c in self.cells))}
        for title, attr in axes.items():
            if attr == "label":  # grouped by decoder, in spec order
                cells = sorted(self.cells, key=lambda c: order[c.decoder])
                values = dict.fromkeys(c.label() for c in cells)
            else:
                values = dict.fromkeys(getattr(c, attr) for c in self.cells)
            lines.append(f"  {title}: {', '.join(map(str, values))}")
            if attr == "label":
                lines += self._per_task()
        subs = dict.fromkeys(c.sub_block_length for c in self.cells if c.sub_block_length is not None)
        if subs:
            lines.append(f"  sub_block_lengths: {', '.join(map(str, subs))}")
        limits = sorted({"all" if c.limit is None else str(c.limit) for c in self.cells})
        lines.append(f"  samples per cell: {', '.join(limits)}")
        options = dict.fromkeys(f"{c.task} {c.task_options}" for c in self.cells if c.task_options != "{}")
        if options:
            lines.append(f"  task options: {'; '.join(options)}")
        lines.append(f"  batch size: {self.batch_size}")
        if self.traces:
            lines.append("  decode traces: kept with each sample (`ripple trace`, parallel failures in reports)")
        if self.left_out:
            lines.append(f"  left out, their data not found: {', '.join(self.left_out)}")
        return "\n".join(lines)


def check_batch_size(value: Any, name: str) -> int:
    """A positive number of samples per engine call, or one line naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RippleError(f"{name} must be a positive number of samples per engine call (1 = one at a time), "
                          f"got {value!r}")
    return value


def shipped_names(directory: Path) -> list[str]:
    """The shipped specs of one kind: the YAML files' stems in `directory`."""
    return sorted(p.stem for p in directory.glob("*.yaml"))


def shipped_specs() -> list[str]:
    return shipped_names(GRIDS_DIR)


class DuplicateKey(Exception):
    """A mapping key written twice in a spec (plain YAML keeps the last value silently)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader refusing a key given twice in any mapping, naming it and its line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)):  # an unhashable key: YAML itself refuses it
                    continue
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise DuplicateKey(f"key {key!r} given twice (line {line}; first at line {seen[key]})")
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml_spec(spec: str, directory: Path, kind: str) -> tuple[Path, Any]:
    """(path, document) of a YAML file or of a shipped spec's name in `directory`; any problem
    finding, reading or parsing it is one line naming the `kind` of spec ("grid", "sweep")."""
    path = Path(spec).expanduser()
    if not path.exists():
        shipped = directory / f"{spec}.yaml"
        if "/" in spec or not shipped.exists():
            raise RippleError(f"{kind} spec {spec!r} not found; give a YAML file or a shipped spec: "
                              f"{', '.join(shipped_names(directory))}")
        path = shipped
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise RippleError(f"cannot read {kind} spec {path} ({reason})") from None
    try:
        return path, yaml.load(text, Loader=UniqueKeyLoader)
    except DuplicateKey as exc:
        raise RippleError(f"{kind} spec {path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise RippleError(f"{kind} spec {path} is not valid YAML: {problem}{where}") from None


def load_spec(spec: str) -> GridSpec:
    """Read, parse and validate a spec file (or shipped spec name) into its cells."""
    path, raw = read_yaml_spec(spec, GRIDS_DIR, "grid")
    return parse_spec(raw, str(path), default_experiment=path.stem)


def parse_spec(raw: Any, where: str, default_experiment: str = "grid") -> GridSpec:
    """Validate a loaded YAML document; every error is one line prefixed by `where`."""
    return SpecParser(where).spec(raw, default_experiment)


class SpecParser:
    def __init__(self, where: str):
        self.where = where
        self.kinds: dict[str, tuple[str, str]] = {}  # model -> (family, noise), where read here (`model`)

    def fail(self, message: str) -> RippleError:
        return RippleError(f"grid spec {self.where}: {message}")

    def keys(self, mapping: dict, accepted: tuple[str, ...], context: str) -> None:
        for key in mapping:
            if key not in accepted:
                close = difflib.get_close_matches(str(key), accepted, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.fail(f"unknown key {key!r}{context}{hint}; accepted: {', '.join(accepted)}")

    def as_list(self, value: Any, key: str) -> list:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise self.fail(f"{key!r} is empty; give at least one value")
        return items

    def positive_ints(self, value: Any, key: str) -> list[int]:
        items = self.as_list(value, key)
        for v in items:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise self.fail(f"{key!r} takes positive integers, got {v!r}")
        return list(dict.fromkeys(items))

    def ints(self, value: Any, key: str) -> list[int]:
        items = self.as_list(value, key)
        for v in items:
            if isinstance(v, bool) or not isinstance(v, int):
                raise self.fail(f"{key!r} takes integers, got {v!r}")
        return list(dict.fromkeys(items))

    def strings(self, value: Any, key: str) -> list[str]:
        items = self.as_list(value, key)
        for v in items:
            if not isinstance(v, str) or not v.strip():
                raise self.fail(f"{key!r} takes non-empty strings, got {v!r}")
        return list(dict.fromkeys(items))

    def chat(self, value: Any) -> tuple[bool, str]:
        """`chat`: false, or the chat template's form; true is lm-eval's default, multi-turn."""
        from ...tasks.prompting import CHAT_FORMS, chat_form

        if not isinstance(value, bool) and value not in CHAT_FORMS:
            forms = f"{', '.join(CHAT_FORMS[:-1])} or {CHAT_FORMS[-1]}"
            raise self.fail(f"'chat' takes false, true (= {chat_form(True)}), {forms}, got {value!r}")
        form = chat_form(value)
        return form is not None, form or "singleturn"  # off: the form a record without one means

    def flag(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(f"{key!r} takes true or false, got {value!r}")
        return value

    def limit(self, value: Any, key: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(f"{key!r} takes a positive number of samples per cell, got {value!r}")
        return value

    def top(self, raw: Any, keys: tuple[str, ...], required: tuple[str, ...], default_experiment: str) -> str:
        """Check a spec's top level (a mapping of known keys with the required ones); its experiment name."""
        if not isinstance(raw, dict):
            raise self.fail(f"expected a mapping of keys ({', '.join(keys)}), got {type(raw).__name__}")
        self.keys(raw, keys, "")
        for key in required:
            if key not in raw:
                raise self.fail(f"missing key {key!r}; required: {', '.join(required)}")
        experiment = raw.get("experiment", default_experiment)
        try:
            check_name("experiment", experiment)
        except RippleError as exc:
            raise self.fail(str(exc)) from None
        return experiment

    def spec(self, raw: Any, default_experiment: str) -> GridSpec:
        experiment = self.top(raw, TOP_KEYS, ("models", "tasks", "decoders", "gen_lengths", "block_lengths"),
                              default_experiment)
        models = self.strings(raw["models"], "models")
        for model in models:
            self.model(model)
        tasks = self.tasks(raw["tasks"], self.limit(raw.get("limit"), "limit"), models)
        decoders = self.decoders(raw["decoders"], models, [task for task, _, _ in tasks])
        self.decoders_fit(models, decoders)
        gens = self.positive_ints(raw["gen_lengths"], "gen_lengths")
        blocks = self.positive_ints(raw["block_lengths"], "block_lengths")
        lengths = {task: (own.get("gen_lengths", gens), own.get("block_lengths", blocks))
                   for task, own in self.task_lengths.items()}
        caches = self.caches(raw.get("caches", ["none"]))
        seeds = self.ints(raw.get("seeds", [0]), "seeds")
        split = raw.get("split", "test")
        if not isinstance(split, str):
            raise self.fail(f"'split' takes a split name such as test, got {split!r}")
        dtype = raw.get("dtype", "auto")
        if dtype not in DTYPES:
            raise self.fail(f"unknown dtype {dtype!r}; accepted: {', '.join(DTYPES)}")
        chat, chat_form = self.chat(raw.get("chat", False))
        stop = self.flag(raw.get("stop_at_eos", False), "stop_at_eos")
        early = self.flag(raw.get("eos_early_stop", False), "eos_early_stop")
        align = self.block_align(raw.get("block_align", "response"))
        sub = self.sub_block_length(raw.get("sub_block_length"), blocks)
        data_dir = raw.get("data_dir")
        if data_dir is not None and not isinstance(data_dir, str):
            raise self.fail(f"'data_dir' takes a directory path, got {data_dir!r}")
        description = raw.get("description", "")
        if not isinstance(description, str):
            raise self.fail("'description' takes a string")
        for task_gens, task_blocks in {task: lengths.get(task, (gens, blocks)) for task, _, _ in tasks}.values():
            self.lengths(task_gens, task_blocks, align)
        for cls, _, _, own in decoders:
            self.decoder_caches(cls, own.get("caches", caches))
            for task, _, _ in tasks if "block_lengths" in own else ():
                self.lengths(lengths.get(task, (gens, blocks))[0], own["block_lengths"], align)

        def axes(task: str, own: dict) -> tuple[list[int], list[int], list[str]]:
            """gen_lengths, block_lengths and caches of a decoder entry's cells for `task`."""
            task_gens, task_blocks = lengths.get(task, (gens, blocks))
            return task_gens, own.get("block_lengths", task_blocks), own.get("caches", caches)

        cells = tuple(
            Cell(model=model, task=task, decoder=label(cls), params=params, limit=limit, gen_length=gen,
                 block_length=block, cache=cache, seed=seed, dtype=dtype, chat=chat, chat_form=chat_form, split=split,
                 stop_at_eos=stop, eos_early_stop=early, task_options=options, block_align=align,
                 sub_block_length=sub, local=None if is_registered(cls) else cls)
            for model, (task, limit, options), (cls, per_task, only, own) in itertools.product(models, tasks, decoders)
            if (only is None or model in only) and model in self.task_models.get(task, (model,))
            for params, gen, block, cache, seed in itertools.product(per_task[task], *axes(task, own), seeds)
        )
        if len({c.decoder: c.local for c in cells}) < len({(c.decoder, c.local) for c in cells}):
            raise self.fail("two local decoder classes share a name; give each its own `name`")
        self.auxiliaries_fit(cells)
        ids = self.cell_ids(cells)
        if len(set(ids)) != len(ids):
            raise self.fail("two decoder entries describe the same cell; remove the duplicate")
        return GridSpec(self.where, experiment, cells, data_dir, self.workers(raw.get("workers", {})), description,
                        self.batch_size(raw.get("batch_size", 1)), tuple(self.if_data),
                        traces=self.flag(raw.get("traces", False), "traces"))

    def cell_ids(self, cells) -> list[str]:
        """Every cell's id; a decoder configuration whose file the model does not ship (`Scheduler.artifacts`,
        a learned filter) is refused now, naming the model, not in a worker."""
        ids = []
        for c in cells:
            try:
                ids.append(c.cell_id)
            except RippleError as exc:
                raise self.fail(f"model {c.model!r}, decoder {c.label()!r}: {exc}") from None
        return ids

    def decoders_fit(self, models: list[str], decoders: list[tuple[type, dict, frozenset | None]]) -> None:
        """Refuse a decoder entry on a model (embedded or local) whose kind of family it cannot decode (a
        mask decoder on a uniform-noise family, renoise on a mask one) now, not in a worker after the load."""
        from ...decoders import check_noise

        for model in models:
            for cls, _, only, _ in decoders:
                if model in self.kinds and (only is None or model in only):
                    try:
                        check_noise(cls, *self.kinds[model])
                    except RippleError as exc:
                        raise self.fail(f"model {model!r}: {exc}") from None

    def auxiliaries_fit(self, cells) -> None:
        """Refuse now, not in a worker after loading the dLLM, a second model a decoder's configuration names
        (a verifier) that is not found or cannot serve the cell's model (auxiliary.check_fit), wherever both
        are local or embedded; a hub id is checked by the worker that downloads it, before decoding."""
        from ..runtime.checkpoints import EMBEDDED, resolve_model_dir

        def local(name: str) -> bool:
            return name in EMBEDDED or Path(name).expanduser().is_dir()

        checked: set[tuple[str, str, str]] = set()
        for c in cells:
            if not c.decoder_class.Params.auxiliary_fields():  # the kind of model is declared there
                continue
            from ..runtime.auxiliary import check_fit  # it imports torch: only for a decoder with a second model

            decoder = c.make_decoder()
            kinds = decoder.Params.auxiliary_fields()
            for hp, name in decoder.auxiliary_models().items():
                if hp not in kinds:
                    continue  # a role without a declared kind: the worker's loader refuses it
                if (c.model, name, hp) in checked:
                    continue
                checked.add((c.model, name, hp))
                if not local(name) and not _HUB_ID.match(name):
                    raise self.fail(f"decoder {c.decoder!r} hyperparameter {hp}={name!r} names no model: give a "
                                    f"checkpoint directory, a hub id (org/name) or an embedded name: "
                                    f"{', '.join(EMBEDDED)}")
                if local(name) and local(c.model):
                    try:
                        check_fit(resolve_model_dir(c.model), resolve_model_dir(name), kinds[hp], aux_name=name)
                    except RippleError as exc:
                        raise self.fail(f"decoder {c.decoder!r} hyperparameter {hp}={name!r} on model "
                                        f"{c.model!r}: {exc}") from None

    def batch_size(self, value: Any) -> int:
        try:
            return check_batch_size(value, "'batch_size'")
        except RippleError as exc:
            raise self.fail(str(exc)) from None

    def model(self, name: str) -> None:
        """An embedded name, a local checkpoint directory (its config, weight and tokenizer files are
        checked here, cheaply: a worker would refuse them only after loading the weights) or a hub id,
        which only the workers resolve: downloading 16 GB into the driver just to validate would be
        wrong. The family's kind of noise is kept for `decoders_fit`."""
        from ..runtime.checkpoints import EMBEDDED, dllm_family, read_config, require_tokenizer, weight_files

        path = Path(name).expanduser()
        if name not in EMBEDDED and path.is_dir():
            try:
                family = dllm_family(name, read_config(path))
                weight_files(path)
                require_tokenizer(name)
            except RippleError as exc:
                raise self.fail(str(exc)) from None
            self.kinds[name] = (family.name, family.noise)
            return
        if name in EMBEDDED:
            if (EMBEDDED[name] / "config.json").exists():
                try:
                    family = dllm_family(name, read_config(EMBEDDED[name]))
                except RippleError as exc:
                    raise self.fail(str(exc)) from None
                self.kinds[name] = (family.name, family.noise)
            return
        if _HUB_ID.match(name):
            return
        raise self.fail(f"model {name!r} not found: give a checkpoint directory, a hub id (org/name) "
                        f"or an embedded name: {', '.join(EMBEDDED)}")

    def tasks(self, value: Any, limit: int | None, models: list[str] = ()) -> list[tuple[str, int | None, str]]:
        """(name, limit, options JSON) per task; options are the task's own (`Task.options`). A task's
        `models` (kept in `task_models`) restricts it to those of the spec's models."""
        self.task_lengths: dict[str, dict[str, list[int]]] = {}
        self.task_models: dict[str, frozenset[str]] = {}
        self.if_data: list[str] = []
        if not isinstance(value, dict):
            names = self.strings(value, "tasks")
            for name in names:
                self.task_class(name)
            return [(name, limit, "{}") for name in names]
        if not value:
            raise self.fail("'tasks' is empty; give at least one task")
        entries = []
        for name, opts in value.items():
            cls = self.task_class(str(name))
            opts = {} if opts is None else opts
            if not isinstance(opts, dict):
                raise self.fail(f"task {name!r} takes a mapping such as {{limit: 50}}, got {opts!r}")
            self.keys(opts, TASK_KEYS + cls.options, f" in task {name!r}")
            options = {k: v for k, v in opts.items() if k not in TASK_KEYS}
            own = {k: self.positive_ints(opts[k], f"tasks.{name}.{k}") for k in TASK_LENGTHS if k in opts}
            if self.flag(opts.get("if_data", False), f"tasks.{name}.if_data"):
                self.if_data.append(str(name))
            if own:
                self.task_lengths[str(name)] = own
            if "models" in opts:
                only = frozenset(self.strings(opts["models"], f"tasks.{name}.models"))
                unknown = sorted(only - set(models))
                if unknown:
                    raise self.fail(f"task {name!r} is restricted to model {unknown[0]!r}, which is not in "
                                    f"'models': {', '.join(models)}")
                self.task_models[str(name)] = only
            try:
                cls.check_options(options)
            except RippleError as exc:
                raise self.fail(str(exc)) from None
            entries.append((name, self.limit(opts.get("limit", limit), f"tasks.{name}.limit"), dumps(options)))
        return entries

    def task_class(self, name: str):
        from ...tasks import task_class

        try:
            return task_class(name)
        except RippleError as exc:
            raise self.fail(str(exc)) from None

    def decoders(self, value: Any, models: list[str], tasks: list[str]
                 ) -> list[tuple[type, dict[str, list[tuple]], frozenset | None, dict[str, list]]]:
        """Each entry: (name, {task: [params, ...]}, models it is restricted to, its own `caches` and
        `block_lengths` where it names them, which replace the grid's for its cells: APD runs under its own
        cache policy and as one block). `task_params`
        override `params` for the tasks they name (the KLASS release tunes per task). `decoders: all`
        is every registered decoder of mask families at its defaults, in display order; so is an entry
        `all` in a list (then further entries add settings). Renoising decoders (uniform-noise
        families such as DiffusionGemma) are named, never implied by `all`, and so are learned decoders
        (`Scheduler.learned`: they need a filter for the model and block length) and decoders with a second model
        (a hyperparameter made with `params.auxiliary`: APD's verifier, named per model). A spec built in Python may
        also name a decoder by a Scheduler subclass or instance of the caller's own (its params are
        an instance's own, under the entry's `params`)."""
        from ...decoders import Scheduler, decoders_for, get

        every = [n for n in decoders_for("mask") if not (get(n).learned or get(n).Params.auxiliary_fields())]
        if value == "all":
            value = every
        entries = [e for entry in self.as_list(value, "decoders")
                   for e in (every if entry == "all" else [entry])]
        out = []
        for entry in entries:
            if isinstance(entry, (str, Scheduler)) or (isinstance(entry, type) and issubclass(entry, Scheduler)):
                entry = {"name": entry}
            if not isinstance(entry, dict) or "name" not in entry:
                raise self.fail(f"a decoder entry is a name or a mapping with 'name' (and 'params', 'task_params', "
                                f"'models', 'caches', 'block_lengths'), got {entry!r}")
            cls, own = self.decoder_class(entry["name"])
            name = label(cls)
            self.keys(entry, DECODER_KEYS, f" in decoder entry {name!r}")
            params = {**own, **self.params_mapping(entry.get("params"), f"decoder {name!r}: 'params'")}
            only = entry.get("models")
            if only is not None:
                only = frozenset(self.strings(only, f"decoders.{name}.models"))
                unknown = sorted(only - set(models))
                if unknown:
                    raise self.fail(f"decoder {name!r} is restricted to model {unknown[0]!r}, which is not in "
                                    f"'models': {', '.join(models)}")
            per_task = entry.get("task_params") or {}
            if not isinstance(per_task, dict):
                raise self.fail(f"decoder {name!r}: 'task_params' takes a mapping of task names to hyperparameters, "
                                f"got {per_task!r}")
            for task in per_task:
                if task not in tasks:
                    close = difflib.get_close_matches(str(task), tasks, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise self.fail(f"decoder {name!r}: task_params names task {task!r}{hint}, which is not in "
                                    f"'tasks': {', '.join(tasks)}")
            grids = {}
            for task in tasks:
                extra = self.params_mapping(per_task.get(task), f"decoder {name!r}: 'task_params.{task}'")
                grids[task] = self.expand(cls, {**params, **extra}, f"decoders.{name}")
            own_axes = {}
            if "caches" in entry:
                own_axes["caches"] = self.caches(entry["caches"])
            if "block_lengths" in entry:
                own_axes["block_lengths"] = self.positive_ints(entry["block_lengths"], f"decoders.{name}.block_lengths")
            out.append((cls, grids, only, own_axes))
        return out

    def decoder_class(self, name: Any) -> tuple[type, dict]:
        """(the Scheduler subclass, an instance's own params) of an entry's `name`."""
        from ...decoders import Scheduler, get

        if isinstance(name, Scheduler):
            return type(name), name.params.to_dict()
        if isinstance(name, type) and issubclass(name, Scheduler):
            return name, {}
        try:
            return get(str(name)), {}
        except RippleError as exc:
            raise self.fail(str(exc)) from None

    def params_mapping(self, value: Any, where: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"{where} takes a mapping of hyperparameters, got {value!r}")
        return value

    def expand(self, cls: type, params: dict, where: str) -> list[tuple]:
        """The validated hyperparameter tuples of one entry: list values expand into one per value."""
        name = cls.name
        grid = {k: self.as_list(v, f"{where}.params.{k}") for k, v in params.items()}
        out = []
        for values in itertools.product(*grid.values()):
            strings = {k: str(v) for k, v in zip(grid, values)}
            try:
                hyper = cls.Params.from_strings(name, strings)
            except RippleError as exc:
                raise self.fail(str(exc)) from None
            out.append(tuple(sorted(hyper.to_dict().items())))
        return out

    def caches(self, value: Any) -> list[str]:
        from ...decoders import CACHE_NAMES

        caches = self.strings(value, "caches")
        for cache in caches:
            if cache not in CACHE_NAMES:
                raise self.fail(f"unknown cache policy {cache!r}; accepted: {', '.join(CACHE_NAMES)}")
        return caches

    def decoder_caches(self, decoder: str | type, caches: list[str]) -> None:
        from ...decoders import get

        cls = get(decoder) if isinstance(decoder, str) else decoder
        supported = cls.supported_caches
        for cache in caches:
            if cache not in supported:
                raise self.fail(f"decoder {label(cls)!r} does not support cache {cache!r}; supported: {', '.join(supported)}")

    def lengths(self, gens: list[int], blocks: list[int], align: str = "response") -> None:
        from ..runtime.generation import GenerationConfig

        for gen, block in itertools.product(gens, blocks):
            try:
                GenerationConfig(gen, block, block_align=align)
            except RippleError as exc:
                raise self.fail(str(exc)) from None

    def sub_block_length(self, value: Any, blocks: list[int]) -> int | None:
        """None (the block length), or a positive length that divides every block length."""
        from ..runtime.generation import check_sub_block

        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"'sub_block_length' takes a positive integer that divides the block lengths, "
                            f"got {value!r}")
        for block in blocks:
            try:
                check_sub_block(value, block)
            except RippleError as exc:
                raise self.fail(str(exc)) from None
        return value

    def block_align(self, value: Any) -> str:
        from ..runtime.generation import BLOCK_ALIGNS

        if value not in BLOCK_ALIGNS:
            raise self.fail(f"'block_align' takes one of {', '.join(BLOCK_ALIGNS)}, got {value!r}")
        return value

    def workers(self, value: Any) -> WorkerSpec:
        if not isinstance(value, dict):
            raise self.fail(f"'workers' takes a mapping ({', '.join(WORKER_KEYS)}), got {value!r}")
        self.keys(value, WORKER_KEYS, " in 'workers'")
        count = value.get("count")
        if count is not None:
            count = self.positive_ints(count, "workers.count")[0]
        cpus = self.positive_ints(value.get("cpus", 1), "workers.cpus")[0]
        gpus = self.positive_ints(value.get("gpus", 1), "workers.gpus")[0]
        device = value.get("device", "auto")
        if device not in WORKER_DEVICES:
            raise self.fail(f"unknown workers.device {device!r}; accepted: {', '.join(WORKER_DEVICES)}")
        restarts = value.get("max_restarts", 2)
        if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
            raise self.fail(f"'workers.max_restarts' takes a non-negative integer, got {restarts!r}")
        return WorkerSpec(device, count, cpus, gpus, restarts)
