"""`ripple trace`: one sample's decode under one or more decoders, as a self-contained HTML page.

Why a page: a parallel decoder's wrong answer is a decision taken from one forward's outputs that
does not fit with another taken from the same outputs, and that only shows when the decode is laid
out by forward. Per decoder, a grid of response positions (columns, after the prompt's tail in grey)
by forwards (rows): each committed token sits in the row of the forward whose outputs decided it,
shaded by the probability those outputs gave it; the tokens of one row were committed together (a
row with two or more is outlined as a group; a lookahead's resolve and the step reading its carried
distributions share the row, the latter marked as carried); edits and remasks are marked. With two
or more decoders, the first commit of each that differs from the first decoder's final token at its
position is highlighted (`ripple/platform/runtime/failures.py`). No network: styles inline, no script.

Sources: a result store written with `traces: true` (`store_panels`), or a `ripple generate --trace`
file (`file_panel`).
"""
from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import RippleError
from ..platform.runtime.failures import Divergence, first_divergence
from ..platform.runtime.reference import Reference
from ..platform.runtime.tracing import Trace

CONTEXT_TOKENS = 8  # prompt tokens shown before the response


@dataclass(frozen=True)
class Panel:
    """One decoder's decode of the sample, as the page draws it."""

    decoder: str  # its label, e.g. rps or topk(k=4)
    trace: Trace
    text: str | None = None  # the final completion text
    correct: bool | None = None  # None: not scored (a --trace file)
    nfe: int | None = None


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:20px}h2{font-size:16px;margin:1.4em 0 .3em}p{margin:.3em 0}
table.grid{border-collapse:separate;border-spacing:0;font:12px ui-monospace,monospace}
table.grid th,table.grid td{border:1px solid #e3e3e3;padding:2px 3px;min-width:1.8em;text-align:center;white-space:pre}
table.grid th.fwd{text-align:left;background:#f6f6f6;font-weight:normal}
td.ctx,th.ctx{color:#999;background:#fafafa}
td.tok{color:#000}
tr.group td.tok{border-top:2px solid #3a6ea5;border-bottom:2px solid #3a6ea5}
td.carried{box-shadow:inset 0 -3px 0 #e69f00}
td.edit{outline:2px dashed #8e44ad;outline-offset:-2px}
td.remask{color:#c0392b;text-decoration:line-through}
td.diverge{outline:3px solid #d62728;outline-offset:-3px;font-weight:bold}
tr.diverge th.fwd{background:#fde0e0}
.ok{color:#2a7d2a}.bad{color:#c0392b}.legend span{display:inline-block;margin-right:1.2em}
pre.info{font-size:11px;max-width:60em;white-space:pre-wrap;margin:0}"""


def _shade(p: float) -> str:
    """A committed token's background: darker blue for a higher probability (white near 0)."""
    if p != p:  # NaN: no probability recorded
        return "#eee"
    a = max(0.0, min(1.0, p))
    return f"rgba(58,110,165,{0.12 + 0.6 * a:.2f})"


def _tok(text: str) -> str:
    """A token's text as a cell shows it: spaces and newlines visible, `<|eos|>` as `eos` (narrow columns)."""
    if len(text) > 4 and text.startswith("<|") and text.endswith("|>"):
        text = text[2:-2]
    return text.replace(" ", "␣").replace("\n", "⏎") or "∅"


def panel_html(panel: Panel, token_text: Callable[[int], str], context: Sequence[int],
               divergence: Divergence | None) -> str:
    """One decoder's grid (a <section>): response positions by forwards."""
    e = html.escape
    decisions = panel.trace.decisions
    positions = sorted({c[0] for d in decisions for c in d.commits} | {x[0] for d in decisions for x in d.edits}
                       | {p for d in decisions for p in d.remasks})
    width = (positions[-1] + 1) if positions else 0
    forwards = sorted({d.forward for d in decisions if d.commits or d.edits or d.remasks})
    verdict = ("" if panel.correct is None else
               f" <b class=\"{'ok' if panel.correct else 'bad'}\">{'correct' if panel.correct else 'wrong'}</b>")
    nfe = "" if panel.nfe is None else f" · NFE {panel.nfe}"
    out = [f"<section class=\"decoder\" data-decoder=\"{e(panel.decoder)}\"><h2>{e(panel.decoder)}{nfe}{verdict}</h2>"]
    if panel.text is not None:
        out.append(f"<p>final text: <code>{e(panel.text)}</code></p>")
    if divergence is not None:
        out.append(f"<p class=\"bad\">first commit differing from the first decoder's final token: forward "
                   f"{divergence.forward}, position {divergence.position}: {e(_tok(token_text(divergence.token)))} "
                   f"where it has {e(_tok(token_text(divergence.reference)))}"
                   f" ({len(divergence.forward_commits)} token(s) committed from that forward"
                   f"{', the wrong one at two or more positions' if divergence.duplicate else ''})</p>")
    out.append("<table class=\"grid\"><thead><tr><th class=\"fwd\">forward</th>")
    out += [f"<th class=\"ctx\">{e(_tok(token_text(t)))}</th>" for t in context]
    out += [f"<th>{p}</th>" for p in range(width)] + ["<th class=\"fwd\">decoder</th></tr></thead><tbody>"]
    for f in forwards:
        rows = [d for d in decisions if d.forward == f]
        cells: dict[int, str] = {}
        committed = sum(len(d.commits) for d in rows)
        for d in rows:
            carried = d.phase == "step" and d.variant is not None
            for p, t, q in d.commits:
                cls = ["tok"] + (["carried"] if carried else [])
                if divergence is not None and (d is decisions[divergence.decision]) and p == divergence.position:
                    cls.append("diverge")
                title = f"forward {f}, {d.phase}" + (f", variant {d.variant}" if d.variant is not None else "") \
                    + f", p={q:.3f}"
                cells[p] = (f"<td class=\"{' '.join(cls)}\" data-forward=\"{f}\" data-pos=\"{p}\" "
                            f"style=\"background:{_shade(q)}\" title=\"{e(title)}\">{e(_tok(token_text(t)))}</td>")
            for p, old, new, q in d.edits:
                cls = "tok edit" + (" diverge" if divergence is not None and d is decisions[divergence.decision]
                                    and p == divergence.position else "")
                cells[p] = (f"<td class=\"{cls}\" data-forward=\"{f}\" data-pos=\"{p}\" style=\"background:"
                            f"{_shade(q)}\" title=\"edit {e(_tok(token_text(old)))} → p={q:.3f}\">"
                            f"✎{e(_tok(token_text(new)))}</td>")
            for p in d.remasks:
                cells[p] = f"<td class=\"remask\" data-forward=\"{f}\" data-pos=\"{p}\" title=\"remasked\">⟲</td>"
        labels = sorted({d.phase for d in rows}) + sorted({f"v{d.variant}" for d in rows if d.variant is not None})
        info = [d.info for d in rows if d.info]
        diverged = divergence is not None and divergence.forward == f
        cls = " ".join((["group"] if committed >= 2 else []) + (["diverge"] if diverged else []))
        out.append(f"<tr class=\"{cls}\" data-forward=\"{f}\"><th class=\"fwd\">F{f} {e(' '.join(labels))}</th>")
        out += ["<td class=\"ctx\"></td>"] * len(context)
        out += [cells.get(p, "<td></td>") for p in range(width)]
        details = (f"<details><summary>{len(info)}</summary><pre class=\"info\">"
                   f"{e(json.dumps(info, default=str)[:4000])}</pre></details>") if info else ""
        out.append(f"<td class=\"ctx\">{details}</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def build_page(title: str, panels: Sequence[Panel], token_text: Callable[[int], str],
               context: Sequence[int] = ()) -> str:
    """The whole page: one grid per panel, each later panel's divergence from the first's final tokens."""
    if not panels:
        raise RippleError("a trace page needs at least one decoder")
    ref = Reference.from_trace(panels[0].trace.decisions)
    body = [panel_html(p, token_text, context, first_divergence(p.trace.decisions, ref) if i else None)
            for i, p in enumerate(panels)]
    e = html.escape
    legend = ("<p class=\"legend\"><span>rows: forwards (F1 = the sample's first)</span><span>columns: response "
              "positions, after the prompt's tail in grey</span><span>shade: the probability the forward gave the "
              "token</span><span style=\"border-top:2px solid #3a6ea5\">outlined row: several tokens committed "
              "from one forward</span><span style=\"box-shadow:inset 0 -3px 0 #e69f00\">carried: committed from a "
              "lookahead's carried distributions</span><span>✎ edit, ⟲ remask</span><span style=\"outline:3px solid "
              "#d62728\">first commit differing from the first decoder's final token</span></p>")
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{e(title)}</title><style>{_CSS}</style>"
            f"</head><body><h1>{e(title)}</h1>{legend}{''.join(body)}</body></html>")


def write_page(page: str, out: Path) -> Path:
    """Write atomically (a temporary name renamed into place): never a half page."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page)
    os.replace(tmp, out)
    return out


# ---------------------------------------------------------------------------- sources
@lru_cache(maxsize=4)
def _tokenizer(model: str):
    """`model`'s tokenizer, or None where it has none at hand (a report writes many pages of one model)."""
    try:
        from ..platform.runtime.loading import load_tokenizer, resolve_model_dir

        return load_tokenizer(resolve_model_dir(model))
    except (RippleError, OSError):
        return None


def token_texts(model: str | None) -> Callable[[int], str]:
    """Token id -> its text under `model`'s tokenizer (special tokens included); the id itself when there
    is no model or no tokenizer."""
    tok = _tokenizer(model) if model else None
    if tok is None:
        return str
    return lambda t: tok.decode([int(t)], skip_special_tokens=False)


@lru_cache(maxsize=8)
def _examples(task: str, options: str, split: str) -> dict:
    from ..tasks import get_task

    return {x.id: x for x in get_task(task, **json.loads(options or "{}")).examples(split, None)}


def _prompt_tail(record: dict[str, Any], model: str) -> list[int]:
    """The last CONTEXT_TOKENS ids of the sample's prompt, re-encoded from its task (none when the data or
    tokenizer are not at hand: the page then starts at the response)."""
    try:
        from ..tasks.prompting import encode_example

        ex = _examples(record["task"], record.get("task_options") or "{}", record["split"])[record["sample_id"]]
        chat = record["chat_form"] if record["chat"] else False
        return encode_example(_tokenizer(model), ex, chat=chat)[-CONTEXT_TOKENS:]
    except Exception:  # noqa: BLE001 -- context is a courtesy; the grid stands without it
        return []


def sample_records(records, experiment: str, task: str, sample: str, decoders: Sequence[str] | None):
    """The records of one sample of `task` under `decoders` (cell labels or decoder names; None: every
    decoder of the task, `default` first), each with a trace; refusals in one line naming what exists."""
    import polars as pl

    from ..decoders import names as registered
    from ..platform.experiments.spec import Cell

    tasks = sorted(set(records["task"].to_list()))
    if task not in tasks:
        raise RippleError(f"unknown task {task!r} in experiment {experiment!r}; its tasks: {', '.join(tasks)}")
    rows = records.filter(pl.col("task") == task)
    ids = rows["sample_id"].unique(maintain_order=True).to_list()
    sid = sample if sample in ids else next((i for i in ids if i.endswith(f"-{sample}")), None)
    if sid is None:
        raise RippleError(f"unknown sample {sample!r} of task {task!r} in experiment {experiment!r}; "
                          f"{len(ids)} samples, e.g. {', '.join(ids[:3])} (or their last part, e.g. "
                          f"{ids[0].rsplit('-', 1)[-1] if ids else '0'})")
    order = {name: i for i, name in enumerate(registered())}  # registry order: default first
    firsts = rows.unique(subset="cell_id", keep="first", maintain_order=True).iter_rows(named=True)
    cells = sorted(((r["cell_id"], Cell.from_record(r)) for r in firsts),
                   key=lambda c: (order.get(c[1].decoder, len(order)), c[1].label()))
    ids = [cid for cid, _ in cells]
    labels = [c.label() for _, c in cells]
    names = [c.decoder for _, c in cells]
    chosen = []
    for want in (decoders or labels):
        if want in ids:  # a cell id (a report's pages: labels may repeat across settings)
            chosen.append(want)
        elif want in labels:
            chosen.append(ids[labels.index(want)])
        elif want in names:
            chosen.append(ids[names.index(want)])
        else:
            raise RippleError(f"unknown decoder {want!r} for task {task!r} in experiment {experiment!r}; "
                              f"accepted: {', '.join(labels)}")
    out = []
    for cid in chosen:
        label = labels[ids.index(cid)]
        rec = rows.filter((pl.col("cell_id") == cid) & (pl.col("sample_id") == sid))
        if rec.height == 0 or rec["trace"][0] is None:
            raise RippleError(f"no decode trace of sample {sid!r} under {label!r} in experiment {experiment!r}; "
                              f"run its grid with `traces: true` (a fresh experiment, or --fresh)")
        out.append((label, rec.row(0, named=True)))
    return sid, out


def store_page(records, experiment: str, task: str, sample: str,
               decoders: Sequence[str] | None = None) -> tuple[str, str]:
    """(the sample's id, the page of it) for one stored sample; every check made before anything is written."""
    sid, chosen = sample_records(records, experiment, task, sample, decoders)
    model = chosen[0][1]["model"]
    panels = [Panel(label, Trace.loads(r["trace"]), r["completion"], r["correct"], r["nfe"]) for label, r in chosen]
    return sid, build_page(f"{experiment} · {sid} · {model}", panels, token_texts(model),
                           _prompt_tail(chosen[0][1], model))


def file_page(path: str | Path, model: str | None = None) -> str:
    """The page of a `ripple generate --trace` file (its first sample), tokens as text when `model` is given."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
        events = [json.loads(line) for line in lines if line.strip()]
    except FileNotFoundError:
        raise RippleError(f"--file {p}: no such file; give a `ripple generate --trace` file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RippleError(f"--file {p} is not a `ripple generate --trace` file (JSON lines): {exc}") from None
    if not events or not all(isinstance(ev, dict) and "phase" in ev for ev in events):
        raise RippleError(f"--file {p} holds no decode trace events; give a `ripple generate --trace` file")
    first = events[0].get("sample", 0)
    trace = Trace.from_events(ev for ev in events if ev.get("sample", 0) == first)
    text = token_texts(model)
    replay = Reference.from_trace(trace.decisions)
    tokens = replay.written()
    final = "".join(text(t) for t in tokens) if model else " ".join(map(str, tokens))
    nfe = replay.nfe
    return build_page(f"{p.name}" + (f" · {model}" if model else ""), [Panel("decode", trace, final, None, nfe)], text)


def trace_page(experiment: str | None = None, *, store: str | Path | None = None, task: str | None = None,
               sample: str | None = None, decoders: str | Sequence[str] | None = None, file: str | Path | None = None,
               model: str | None = None, out: str | Path | None = None) -> Path:
    """`ripple trace`: write the page of a stored sample (experiment, task, sample) or of a `--trace` file;
    returns its path. Every refusal comes before anything is written."""
    if file is not None:
        if experiment or task or sample or decoders:
            raise RippleError("--file takes no experiment, --task, --sample or --decoders; give one source")
        page = file_page(file, model)
        return write_page(page, Path(out) if out else Path(file).with_suffix(".html"))
    if not experiment or not task or not sample:
        raise RippleError("ripple trace needs EXPERIMENT --task T --sample ID (a store run with traces: true), "
                          "or --file F (a `ripple generate --trace` file)")
    from ..platform.experiments.grid import default_store
    from .records import load_records, slug

    root = Path(store) if store else default_store()
    records = load_records(root, experiment)
    names = [d.strip() for d in decoders.split(",")] if isinstance(decoders, str) else decoders
    sid, page = store_page(records, experiment, task, sample, [d for d in names if d] if names else None)
    target = Path(out) if out else root.expanduser() / experiment / "traces" / f"{slug(sid)}.html"
    return write_page(page, target)
