"""Fast-dLLM v2 (fast_dllm_v2, model_type Fast_dLLM_Qwen): logits of the model's own remote code on
fast-dllm-v2-tiny (full forwards under the inference mask, a cached tail, the block cache's sub-block
forward), its `generate` trajectories through `ripple generate` (sub-blocks, block cache = dual, the
stop rule), `batch_sample`'s rows against Ripple's batches, and the family's layout and stop rule."""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ripple.cli import main
from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.loading import load_model
from ripple.platform.runtime.models.transformer import KVCache
from tests.platform.runtime.checkpoints import changed_copy, refused_in_one_line

NAME = "fast-dllm-v2-tiny"


@pytest.fixture(scope="module")
def v2(golden):
    return load_model(str(golden / NAME), "float32", "cpu")


def _cases(golden, function):
    return [c for c in json.loads((golden / NAME / "trajectories.json").read_text()) if c["function"] == function]


def _mask(q_pos: torch.Tensor, k_pos: torch.Tensor, B: int) -> torch.Tensor:
    """The reference's inference mask: query position q sees key j iff q // B >= j // B: [1, 1, Q, K]."""
    return (q_pos[:, None] // B >= k_pos[None, :] // B)[None, None]


def test_family_facts_from_the_checkpoint(v2):
    cfg, m = v2.model.cfg, v2.model
    assert v2.model_type == "fast_dllm_v2" and v2.mask_id == 150  # |<MASK>| from added_tokens.json
    assert v2.eos_ids == (151,) and v2.pad_id == 151  # config.json's eos_token_id alone stops it (stop_ids)
    assert (cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.mlp_hidden) == (64, 4, 2, 16, 96)
    assert cfg.qkv_bias and not cfg.out_bias and cfg.rotary_dim == cfg.head_dim and cfg.rope_theta == 1e6
    assert m.block_causal and m.shift == 1 and m.opening_commit and m.eos_stops_mid_block and not m.stops_at_eos
    assert not torch.equal(m.head.weight, m.embed.weight)  # untied


def test_logits_match_the_reference_full_cached_tail_and_block_cache(v2, golden):
    exp = load_file(str(golden / NAME / "expected.safetensors"))
    model = v2.model
    worst = 0.0
    for i in range(3):  # whole inputs, no cache, under block 8 (bd_size) and the forward's default 32
        ids = exp[f"input_ids_{i}"]
        pos = torch.arange(ids.shape[1])
        for B in (8, 32):
            out = model(ids, pos[None], attn_mask=_mask(pos, pos, B)).logits
            worst = max(worst, float((out - exp[f"logits_block{B}_{i}"]).abs().max()))
    # a 24-position KV cache (block 8, stored), then the last block as a decoding forward
    ids = exp["input_ids_1"]
    pos = torch.arange(32)
    prefill = model(ids[:, :24], pos[None, :24], attn_mask=_mask(pos[:24], pos[:24], 8), return_kv=True)
    cache = KVCache([torch.cat((k, k[:, :, :8] * 0), 2) for k in prefill.kv.keys],
                    [torch.cat((v, v[:, :, :8] * 0), 2) for v in prefill.kv.values])  # slots 24..31: recomputed
    tail = model(ids[:, 24:], pos[None, 24:], attn_mask=_mask(pos[24:], pos, 32), kv=cache, window=(24, 32)).logits
    worst = max(worst, float((tail - exp["logits_cached_tail_1"]).abs().max()))
    # block cache: the whole-block forward that fills it, then a sub-block forward after one commit
    ids, after = exp["input_ids_2"], exp["input_ids_2_after_commit"]
    pos = torch.arange(40)
    prefill = model(ids[:, :32], pos[None, :32], attn_mask=_mask(pos[:32], pos[:32], 8), return_kv=True)
    pad = lambda t: torch.cat((t, t[:, :, :8] * 0), 2)  # noqa: E731
    cache = KVCache([pad(k) for k in prefill.kv.keys], [pad(v) for v in prefill.kv.values])
    full = model(ids[:, 32:], pos[None, 32:], kv=cache, window=(32, 40), return_kv=True)  # block 32..39: all visible
    worst = max(worst, float((full.logits - exp["logits_block_cache_full_2"]).abs().max()))
    block_cache = cache.merge(full.kv, 32, 40, 40)  # the KV cache then the block's 8 slots
    sub = model(after[:, 36:], pos[None, 36:], kv=block_cache, window=(36, 40)).logits  # no mask
    worst = max(worst, float((sub - exp["logits_block_cache_sub_2"]).abs().max()))
    recompute = model(after[:, 32:], pos[None, 32:], kv=cache, window=(32, 40)).logits
    worst = max(worst, float((recompute - exp["logits_block_recompute_2"]).abs().max()))
    assert float((sub - recompute[:, 4:]).abs().max()) > 0.1  # stale slots 0..3: an approximation, as there
    assert worst < 1e-4, worst


# ---------------------------------------------------------------- generate
def _gen_length(case) -> int:
    """The response Ripple decodes for the reference's max_new_tokens: its whole blocks from the prompt on."""
    B = case["args"]["block_size"]
    return (case["args"]["max_new_tokens"] // B) * B - case["prompt_length"] % B


def _argv(golden, prompt, args, gen_length, trace=None, sub=True):
    """generate(block_size, small_block_size, threshold, use_block_cache) as `ripple generate`."""
    argv = ["generate", "--model", str(golden / NAME), "--input-ids", ",".join(map(str, prompt)),
            "--decoder", "confidence", "--set", f"tau={args['threshold']}", "--block-length", str(args["block_size"]),
            "--cache", "dual" if args["use_block_cache"] else "prefix", "--block-align", "absolute",
            "--stop-at-eos", "--gen-length", str(gen_length), "--dtype", "float32", "--device", "cpu", "--json"]
    if sub:
        argv += ["--sub-block-length", str(args["small_block_size"])]
    return argv + (["--trace", str(trace)] if trace else [])


def _public_generate_runs(golden):
    """Every public generate run but the one-block-long prompt (the reference ignores that prompt's
    block, Ripple reads it: docs/models.md)."""
    cases = _cases(golden, "generate")
    assert len(cases) == 12
    kept = [c for c in cases if c["prompt_length"] != c["args"]["block_size"]]
    assert len(kept) == 11
    return kept


def test_reference_generate_runs_token_for_token(golden, capsys, tmp_path):
    """Each run: the response up to the reference's stop (all of it where none), every decoding
    forward's commits in order, and NFE = the reference's forwards less the block-end forward after the
    last block (it only appends a token past the response); its prefill is Ripple's too (the family
    `prefills_prompt_blocks`: a forward over the prompt's whole blocks before the first block opens)."""
    stops = 0
    for case in _public_generate_runs(golden):
        G = _gen_length(case)
        trace = tmp_path / f"{case['case']}.jsonl"
        assert main(_argv(golden, case["prompt"], case["args"], G, trace)) == 0
        out = json.loads(capsys.readouterr().out)
        stop = case["stop_response_position"]
        upto = G if stop is None else stop + 1
        assert out["tokens"][:upto] == case["generated"][:upto], case["case"]
        if stop is not None:
            stops += 1
            assert out["generated_tokens"] == stop and set(out["tokens"][upto:]) <= {151}, case["case"]
        ref = [sorted(map(tuple, e["unmasked"])) for e in case["steps_log"] if e["kind"] == "decode"]
        events = [json.loads(line) for line in trace.read_text().splitlines()]
        ours = [sorted(map(tuple, e["committed"])) for e in events if e["phase"] == "step"]
        assert ours == ref, case["case"]
        # the block-opening commits are the reference's prefill and block-end tokens that land in the response
        ends = [tuple(e["next_token"]) for e in case["steps_log"] if e.get("next_token")]
        opened = [tuple(p) for e in events if e["phase"] == "open" for p in e["committed"]]
        assert opened == [t for t in ends if 0 <= t[0] < upto], case["case"]
        last_end = case["ended_by"] == "max_new_tokens"
        assert out["nfe"] == case["nfe"] - int(last_end), case["case"]
    assert stops == 4  # 4 of the 11 end on a stop, mid-block (the 12th is the excluded one)


def test_dual_sub_block_forwards_are_the_block_caches(v2, golden):
    """With the block cache the reference's sub-block forwards (the sub-block's tokens only, no mask) are
    Ripple's `dual` forwards over the sub-block alone: as many, run by the same runs' decisions."""
    fed = []

    class Spy:
        def __getattr__(self, name):
            return getattr(v2.model, name)

        def __call__(self, tokens, *a, **k):
            fed.append(tokens.shape[1])
            return v2.model(tokens, *a, **k)

    eng = Engine(Spy(), mask_id=v2.mask_id, eos_ids=v2.eos_ids, pad_id=v2.pad_id)
    runs = 0
    for case in _public_generate_runs(golden):
        a = case["args"]
        if not a["use_block_cache"] or a["small_block_size"] == a["block_size"]:
            continue
        fed.clear()
        cfg = GenerationConfig(_gen_length(case), a["block_size"], "dual", stop_at_eos=True, block_align="absolute",
                               sub_block_length=a["small_block_size"])
        eng.generate([case["prompt"]], build("confidence", {"tau": str(a["threshold"])}), cfg)
        subs = [e for e in case["steps_log"] if e["kind"] == "decode" and e["input"] == "sub_block"]
        assert sum(n == a["small_block_size"] for n in fed) == len(subs) == case["nfe_decode_sub_block"] > 0, case["case"]
        runs += 1
    assert runs == 5


def test_prefix_and_none_decode_the_same_tokens(golden, capsys):
    """Without the block cache the reference is block-causal and exact: `none` recomputes the same, in
    one forward fewer where the prompt ends inside a block after whole ones (no cache: no prefill)."""
    prefilled = 0
    for case in _public_generate_runs(golden)[:6]:
        if case["args"]["use_block_cache"]:
            continue
        runs = []
        for cache in ("prefix", "none"):
            argv = _argv(golden, case["prompt"], case["args"], _gen_length(case))
            argv[argv.index("--cache") + 1] = cache
            assert main(argv) == 0
            runs.append(json.loads(capsys.readouterr().out))
        P, B = case["prompt_length"], case["args"]["block_size"]
        silent = P > B and P % B != 0  # the prefill yields no token: under `none` the opening forward does its work
        prefilled += silent
        assert runs[0]["tokens"] == runs[1]["tokens"] and runs[0]["nfe"] == runs[1]["nfe"] + silent, case["case"]
    assert prefilled > 0


def test_sub_block_equal_to_the_block_changes_nothing(golden, capsys, tmp_path):
    case = _public_generate_runs(golden)[0]
    outs = []
    for sub in (None, case["args"]["block_size"]):
        args = dict(case["args"], small_block_size=sub)
        trace = tmp_path / f"{sub}.jsonl"
        assert main(_argv(golden, case["prompt"], args, _gen_length(case), trace, sub=sub is not None)) == 0
        out = json.loads(capsys.readouterr().out)
        outs.append((out["tokens"], out["nfe"], trace.read_text()))
    assert outs[0] == outs[1]


def test_stop_rule_ends_at_the_stop_without_another_forward(v2):
    """`--stop-at-eos` on this family: the row ends as soon as its response holds a stop id with no mask
    before it (the stop may be committed before the masks ahead of it); without it, every block."""
    eng = Engine.from_loaded(v2)
    prompt = [56, 79, 108, 106, 117, 87, 69, 12, 104, 78, 14, 34, 122, 60, 55, 145]
    dec = lambda: build("confidence", {"tau": "0.9"})  # noqa: E731
    on = eng.generate([prompt], dec(), GenerationConfig(32, 8, "prefix", stop_at_eos=True, sub_block_length=4))[0]
    off = eng.generate([prompt], dec(), GenerationConfig(32, 8, "prefix", sub_block_length=4))[0]
    stop = on.tokens.index(151)
    assert on.tokens[:stop + 1] == off.tokens[:stop + 1] and on.nfe < off.nfe
    assert set(on.tokens[stop:]) == {151} and 150 not in off.tokens


def test_endoftext_mid_response_is_text_the_stop_token_alone_ends_it(golden, capsys):
    """The reference's `generate` stops on its stop_token (config.json's eos_token_id, 151 `<|im_end|>`);
    152 `<|endoftext|>`, which generation_config.json also lists, is an ordinary token to it. A run of the
    reference code (run_chatbot's geometry: block 32, sub-block 8, threshold 0.9, no block cache, 64 new
    tokens) commits 152 at response position 8 and goes on to its stop at 33 in 31 forwards."""
    prompt = [111, 142, 50, 37, 45, 139, 47, 84, 125, 18, 140, 0, 103]
    reference = [93, 50, 139, 101, 104, 147, 80, 80, 152, 1, 1, 145, 125, 27, 114, 56, 11, 11, 11, 49, 108, 57,
                 134, 68, 66, 32, 123, 1, 80, 110, 115, 80, 9, 151]
    args = {"threshold": 0.9, "block_size": 32, "small_block_size": 8, "use_block_cache": False}
    G = (64 // 32) * 32 - len(prompt) % 32  # 51: the two blocks from the prompt on
    assert main(_argv(golden, prompt, args, G)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"][:len(reference)] == reference and set(out["tokens"][len(reference):]) == {151}
    assert out["nfe"] == 31 and out["generated_tokens"] == len(reference) - 1  # the tokens before the stop
    # without --stop-at-eos the same tokens up to the stop, and generated tokens still end at the stop id
    argv = _argv(golden, prompt, args, G)
    argv.remove("--stop-at-eos")
    assert main(argv) == 0
    free = json.loads(capsys.readouterr().out)
    assert free["tokens"][:len(reference)] == reference and free["generated_tokens"] == len(reference) - 1
    assert free["nfe"] > 31


def test_stop_ids_are_each_family_s_declared_rule(golden):
    """`stop_ids` by name: Fast-dLLM v2 stops on config.json's eos_token_id, DiffusionGemma on its
    generation config's list, every other family on every end id the files name (unchanged); a rule whose
    file names none falls back to every id, and an unknown rule is refused naming the accepted ones."""
    from ripple.platform.runtime.loading import special_ids
    from ripple.platform.runtime.models.family import Family, get_family

    assert {t: get_family(t).stop_ids for t in ("llada", "dream", "llada2_moe", "sdar", "fast_dllm_qwen",
                                                 "diffusion_gemma")} == {
        "llada": "every", "dream": "every", "llada2_moe": "every", "sdar": "every", "fast_dllm_qwen": "config",
        "diffusion_gemma": "generation_config"}
    path = golden / NAME
    cfg = json.loads((path / "config.json").read_text())
    assert [special_ids(cfg, path, None, stop_rule=r)[1] for r in ("every", "config", "generation_config")] == [
        (151, 152), (151,), (151, 152)]
    unnamed = {k: v for k, v in cfg.items() if k != "eos_token_id"}
    assert special_ids(unnamed, path, None, stop_rule="config")[1] == (151, 152)  # generation_config.json's
    with pytest.raises(ValueError, match="stop_ids 'eos' is unknown; accepted: every, config, generation_config"):
        Family("x", ("x",), 0, dict, str, bool, len, stop_ids="eos")


# ---------------------------------------------------------------- batch_sample
def _batch_runs(v2, case):
    a = case["args"]
    prompts = [r["prompt"] for r in case["rows"]]
    B = a["block_size"]
    G = max((a["max_new_tokens"] // B) * B - len(p) % B for p in prompts)
    cfg = GenerationConfig(G, B, "dual" if a["use_block_cache"] else "prefix", stop_at_eos=True,
                           block_align="absolute", sub_block_length=a["small_block_size"])
    eng = Engine.from_loaded(v2)
    dec = lambda: build("confidence", {"tau": str(a["threshold"])})  # noqa: E731
    batch = eng.generate(prompts, dec(), cfg)
    singles = [eng.generate([p], dec(), cfg)[0] for p in prompts]
    return prompts, batch, singles


@pytest.mark.parametrize("cache,sub", [("prefix", 4), ("dual", 2)])
def test_the_prefill_in_a_batch_of_every_prompt_kind(v2, cache, sub):
    """Prompts shorter than a block (no prefill), ending on a block boundary (the prefill opens the
    block: no opening forward) and ending inside a block after whole ones (a prefill that yields no
    token, then the opening): the batch's rows equal their single runs, and only the last kind costs
    a forward more than under `none`."""
    prompts = [[5, 17, 40], [5, 17, 40, 9, 33, 2, 71, 8], [5, 17, 40, 9, 33, 2]]
    eng = Engine.from_loaded(v2)
    runs = {}
    for c in (cache, "none"):
        cfg = GenerationConfig(12, 4, c, sub_block_length=sub if c == cache else None)
        dec = lambda: build("confidence", {"tau": "0.9"})  # noqa: E731
        batch = eng.generate(prompts, dec(), cfg)
        singles = [eng.generate([p], dec(), cfg)[0] for p in prompts]
        assert [(b.tokens, b.nfe) for b in batch] == [(o.tokens, o.nfe) for o in singles]
        runs[c] = singles
    none = [o.nfe for o in runs["none"]]
    if cache == "prefix":  # same sub-block setting only under prefix: the same decisions, so the same tokens
        assert [o.tokens for o in runs[cache]] == [o.tokens for o in runs["none"]]
        assert [o.nfe for o in runs[cache]] == [none[0], none[1], none[2] + 1]


@pytest.mark.parametrize("index", range(4))
def test_batch_rows_equal_single_runs_and_the_reference_where_it_does_not_interfere(v2, golden, index):
    """Ripple's batch rows equal its single runs (tokens and NFE). batch_sample's rows equal them too
    up to the row's stop, except where its rows interfere, as the golden cases show: a shortest prompt
    exactly one block long makes every row skip that block (quirk 1, block 16), and the block-end token
    of a block that ends one id before the longest prompt's end overwrites that prompt's last id
    (quirk 9, block 4: id 72 becomes 82)."""
    case = _cases(golden, "batch_sample")[index]
    prompts, batch, singles = _batch_runs(v2, case)
    assert [(b.tokens, b.nfe) for b in batch] == [(s.tokens, s.nfe) for s in singles]
    B = case["args"]["block_size"]
    for r, (p, ours) in enumerate(zip(prompts, batch)):
        ref = case["outputs"][r]
        gen = ref[len(p):]
        stop = case["row_end"][r]["first_stop_response_position"]
        own = (case["args"]["max_new_tokens"] // B) * B - len(p) % B  # the row's response alone
        upto = own if stop is None else stop + 1
        same = list(ours.tokens[:upto]) == gen[:upto] and ref[:len(p)] == p
        if case["min_len"] == B:  # quirk 1: the reference never reads the first block
            assert not same and case["steps_log"][0]["rope_positions"][0] == 0 and case["steps_log"][0]["block"] == 1
        elif len(p) == max(map(len, prompts)) and len(p) % B == 1 and len(p) - 1 > case["min_len"] // B * B:
            # quirk 9: the longest prompt ends one id past a decoded block: its block-end argmax overwrote that id
            assert ref[len(p) - 1] != p[-1] and [-1, ref[len(p) - 1]] in [x[1:] for e in case["steps_log"]
                                                                           if e["kind"] == "block_end"
                                                                           for x in e["next_token"]]
            assert not same
        else:
            assert same, (case["case"], r)


# ---------------------------------------------------------------- bad values
@pytest.mark.parametrize("sub,block,message", [
    ("3", "8", "sub_block_length 3 does not divide block_length 8; accepted: 1, 2, 4, 8"),
    ("16", "8", "sub_block_length 16 does not divide block_length 8; accepted: 1, 2, 4, 8"),
    ("0", "8", "sub_block_length 0 does not divide block_length 8; accepted: 1, 2, 4, 8"),
    ("-4", "8", "sub_block_length -4 does not divide block_length 8; accepted: 1, 2, 4, 8"),
])
def test_bad_sub_block_lengths_are_one_line_and_exit_2(golden, capsys, sub, block, message):
    argv = ["generate", "--model", str(golden / NAME), "--input-ids", "1,2,3", "--decoder", "confidence",
            "--gen-length", "16", "--block-length", block, "--sub-block-length", sub]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


@pytest.mark.parametrize("changes,message", [
    ({"rope_scaling": {"type": "yarn", "factor": 4.0}}, "Fast_dLLM_Qwen rope_scaling {'type': 'yarn', 'factor': 4.0} is not supported"),
    ({"use_sliding_window": True}, "Fast_dLLM_Qwen use_sliding_window true is not supported; supported: false"),
    ({"num_key_value_heads": 3}, "num_attention_heads 4 is not divisible by num_key_value_heads 3"),
    ({"hidden_size": None}, "config.json lacks 'hidden_size', needed to build the Fast_dLLM_Qwen model"),
])
def test_bad_configs_are_one_line_and_exit_2(golden, tmp_path, capsys, changes, message):
    refused_in_one_line(capsys, changed_copy(golden / NAME, tmp_path / "ck", changes), message,
                        decoder="confidence", block_length=8)


def test_no_mask_token_anywhere_is_one_line(golden, tmp_path, capsys):
    d = changed_copy(golden / NAME, tmp_path / "ck", {})
    (d / "added_tokens.json").write_text(json.dumps({"<|im_end|>": 151}))
    refused_in_one_line(capsys, d, "no mask_token_id in config.json nor a mask token in the tokenizer",
                        decoder="confidence", block_length=8)


# ---------------------------------------------------------------- the grid
def test_shipped_fast_dllm_v2_grid_validates_with_a_dry_run(capsys):
    assert main(["grid", "fast-dllm-v2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "experiment fast-dllm-v2, 104 cells" in out and "models: Efficient-Large-Model/Fast_dLLM_v2_7B" in out
    assert "tasks: gsm8k, math500, humaneval, mbpp" in out
    for name in ["confidence", "rps", "default", "klass", "eb_sampler", "wino", "lopa", "dinfer_threshold",
                 "hierarchy", "credit", "pc_sampler", "dus", "slow_fast"]:
        assert name in out
    assert "block_lengths: 32" in out and "sub_block_lengths: 8" in out and "caches: prefix, dual" in out
    assert "left out, their data not found: parallelbench/waiting_line/copy," in out


def test_the_grid_runs_parallelbench_s_tasks_where_their_files_are_found(tmp_path, capsys):
    """`if_data` tasks: ParallelBench's twelve join the grid from a data directory holding them (the
    test fixtures: 12 x 13 decoders x 2 caches more cells), only those found from one holding some, and
    the 104 cells keep their ids."""
    from ripple.api import grid_spec

    fixtures = Path(__file__).parents[2] / "tasks" / "fixtures"
    full = grid_spec("fast-dllm-v2", data_dir=str(fixtures))
    assert len(full.cells) == 104 + 12 * 13 * 2 and not full.left_out
    some = tmp_path / "parallelbench" / "waiting_line"
    some.mkdir(parents=True)
    for name in ("task_config.yaml", "copy.jsonl"):
        (some / name).write_text((fixtures / "parallelbench" / "waiting_line" / name).read_text())
    part = grid_spec("fast-dllm-v2", data_dir=str(tmp_path))
    assert {c.task for c in part.cells} - {"gsm8k", "math500", "humaneval", "mbpp"} == {"parallelbench/waiting_line/copy"}
    assert len(part.left_out) == 11
    pb = [c for c in part.cells if c.task.startswith("parallelbench")]
    assert {(c.gen_length, c.block_length, c.sub_block_length) for c in pb} == {(32, 32, 8)}
    (tmp_path / "empty").mkdir()
    none = grid_spec("fast-dllm-v2", data_dir=str(tmp_path / "empty"))
    assert [c.cell_id for c in none.cells] == [c.cell_id for c in full.cells if c.task in {
        "gsm8k", "math500", "humaneval", "mbpp"}]
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [ripple-tiny]\ntasks: {arith: {if_data: yes please}}\ndecoders: [default]\n"
                   "gen_lengths: [16]\nblock_lengths: [16]\n")
    assert main(["grid", str(bad), "--dry-run"]) == 2
    assert "'tasks.arith.if_data' takes true or false" in capsys.readouterr().err


def test_sweep_spec_takes_sub_block_length(tmp_path):
    from ripple.errors import RippleError
    from ripple.sweeps.spec import load_sweep_spec

    base = ("experiment: s\nmodel: ripple-tiny-bd\ntasks: [arith]\ndecoder: confidence\n"
            "space: {tau: [0.5, 0.9]}\ngen_length: 16\nblock_length: 8\n")
    (tmp_path / "a.yaml").write_text(base + "sub_block_length: 4\n")
    spec = load_sweep_spec(str(tmp_path / "a.yaml"))
    assert spec.sub_block_length == 4 and spec.cells_for("confidence", {"tau": 0.5})[0].sub_block_length == 4
    (tmp_path / "b.yaml").write_text(base + "sub_block_length: 3\n")
    with pytest.raises(RippleError, match="sub_block_length 3 does not divide block_length 8"):
        load_sweep_spec(str(tmp_path / "b.yaml"))


# ---------------------------------------------------------------- sub-blocks on every family
@pytest.mark.parametrize("checkpoint", [NAME, "llada-tiny"])
def test_every_decoder_and_cache_keeps_the_invariants_in_sub_blocks(golden, checkpoint):
    """Sub-blocks of 4 in blocks of 8, every mask decoder x none/prefix/dual, on this family and on a
    full-attention one (ripple.testing: blocks end unmasked, decisions only inside their sub-block,
    NFE = forwards run, batch = single runs; none and prefix decode the same tokens on block diffusion)."""
    from ripple.decoders import get, names
    from ripple.testing import check_decoder_on_model
    from tests.decoders.test_invariants import decoder  # with the data files a decoder reads (a learned filter)

    lm = load_model(str(golden / checkpoint), "float32", "cpu")
    checked = 0
    for name in names():
        if get(name).noise != "mask" or "none" not in get(name).supported_caches:  # (apd: its own window)
            continue
        try:
            check_decoder_on_model(lambda: decoder(name, {}, block_length=8), lm, sub_block_length=4,
                                   prompts=((12, 40, 77, 3, 90, 15), (5, 9, 33, 4, 6, 7, 8, 10)))
        except AssertionError as exc:
            raise AssertionError(f"{checkpoint}, {name}: {exc}") from None
        checked += 1
    assert checked >= 14


def test_the_stop_rule_also_fires_when_the_masks_before_an_earlier_stop_fill():
    """The reference tests its stop before every forward, so a stop committed while masks lay before it
    ends the row as soon as the last of them is filled, by a decision that commits no stop (LLaDA2's
    eos_early_stop only looks after a decision that commits one). Scripted: the stop is the most
    confident position, the two before it come next, then the block would go on one position a step."""
    from ripple.testing import SCRIPTED_EOS, SCRIPTED_MASK, SCRIPTED_VOCAB, ScriptedModel, spread

    P = 4
    plan = {P: (5, 0.6), P + 1: (6, 0.5), P + 2: (SCRIPTED_EOS, 0.99)}

    def script(pos, seen):
        token, p = plan.get(pos, (7, 0.3))
        return spread(SCRIPTED_VOCAB, token, p)

    def run(mid_block: bool, **settings):
        model = ScriptedModel(SCRIPTED_VOCAB, script)
        model.eos_stops_mid_block = mid_block
        eng = Engine(model, mask_id=SCRIPTED_MASK, eos_ids=[SCRIPTED_EOS], pad_id=0)
        events = []
        out = eng.generate([[10, 11, 12, 13]], build("confidence", {"tau": "0.9"}), GenerationConfig(8, 8, **settings),
                           trace=events.append)[0]
        return out, [[p for p, _ in e["committed"]] for e in events]

    out, commits = run(True, stop_at_eos=True)
    assert commits == [[2], [0], [1]] and out.nfe == 3 and out.tokens == (5, 6) + (SCRIPTED_EOS,) * 6
    for mid_block, settings in ((False, {"stop_at_eos": True}), (False, {"eos_early_stop": True}), (True, {})):
        other, commits = run(mid_block, **settings)
        assert other.tokens[:3] == out.tokens[:3] and other.nfe == 8 and len(commits) == 8


def test_harness_model_args_take_sub_block_length(golden):
    from ripple.errors import RippleError
    from ripple.platform.experiments.harness import check_model_args

    args = check_model_args(pretrained=str(golden / NAME), decoder="confidence", gen_length=16, block_length=8,
                            sub_block_length=4, device="cpu")
    assert args.config.sub_block_length == 4 and args.config.sub_block == 4
    with pytest.raises(RippleError, match="sub_block_length 3 does not divide block_length 8; accepted: 1, 2, 4, 8"):
        check_model_args(pretrained=str(golden / NAME), decoder="confidence", gen_length=16, block_length=8,
                         sub_block_length=3, device="cpu")
