"""A second model on the worker (issue 58): a decoder declares the hyperparameter that names one (a verifier,
a causal LM) and the platform loads it beside the dLLM, once per worker and model (resolved folder and
weights digest), on the dLLM's device and dtype, hands it to the decoder, stamps its digest on every record
(a resumed grid refuses samples another verifier decoded) and counts its forwards apart (`verifier_nfe`).
One that cannot serve the dLLM is refused in one line before anything decodes. The decoder here is scripted
in the test; the models are real: dream-tiny with qwen2-verifier-tiny (golden), and ripple-tiny with a
random Qwen2 causal LM on ripple-tiny's tokenizer written per test."""
import json
import shutil
from dataclasses import dataclass

import pytest
import torch
from safetensors.torch import load_file, save_file

import ripple
from ripple.decoders.base import greedy
from ripple.decoders.params import HyperParams, auxiliary, hp
from ripple.platform.experiments.grid import plan
from ripple.platform.experiments.spec import parse_spec
from ripple.platform.experiments.store import ResultStore
from ripple.platform.experiments.workers import SampleWorker
from ripple.platform.runtime.auxiliary import AuxiliaryModels, check_fit
from ripple.platform.runtime.causal import next_token_logits
from ripple.platform.runtime.loading import EMBEDDED, load_causal, load_model, weights_digest


@dataclass(frozen=True)
class DrafterParams(HyperParams):
    verifier: str = auxiliary("", doc="the causal LM that scores the committed prefix")
    every: int = hp(1, 1, 8, doc="run the verifier on every k-th step")


class Drafter(ripple.Scheduler):
    """Commit the leftmost masked position with the dLLM's top-1 token; on every `every`-th step first run
    the verifier over the block up to that position (a second model's forward, which the engine counts apart).
    It declares the verifier only through its Params (`auxiliary`): `auxiliary_models()` is the default's."""

    Params = DrafterParams

    def step(self, state):
        tokens, _ = greedy(state)  # [L]
        at = state.masked.nonzero()[0]  # [1]
        if state.step % self.params.every == 0:
            logits = next_token_logits(state.models["verifier"], state.tokens[None, :int(at) + 1])  # [1, a, V]
            assert logits.dtype == torch.float32 and logits.shape[-1] >= int(tokens.max()) + 1
        return ripple.Plan(ripple.Commit(at, tokens[at]))


class CausalForwards:
    """Counts the forwards every causal module runs (a global forward hook: independent of the decoder's count)."""

    def __enter__(self):
        self.n = 0

        def hook(module, args, out):
            if getattr(module, "causal", False) and hasattr(module, "embed"):
                self.n += 1

        self.handle = torch.nn.modules.module.register_module_forward_hook(hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def write_verifier(folder, golden, seed: int = 0, tokenizer_of: str = "ripple-tiny"):
    """A random Qwen2 causal LM on ripple-tiny's vocabulary: qwen2-verifier-tiny's layers, its embedding and head
    redrawn N(0, 0.3) at the vocabulary size of `tokenizer_of`'s tokenizer, whose files it carries."""
    from ripple.platform.runtime.loading import load_tokenizer

    folder.mkdir(parents=True)
    src = golden / "qwen2-verifier-tiny"
    vocab = len(load_tokenizer(EMBEDDED["ripple-tiny"]))
    cfg = json.loads((src / "config.json").read_text())
    weights = load_file(src / "model.safetensors")
    g = torch.Generator().manual_seed(seed)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        weights[name] = torch.randn(vocab, cfg["hidden_size"], generator=g) * 0.3  # [V, H]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps({**cfg, "vocab_size": vocab}))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(EMBEDDED[tokenizer_of] / f, folder / f)
    return folder


def test_a_decoder_declares_its_second_model_in_its_params():
    assert DrafterParams.auxiliary_fields() == {"verifier": "causal_lm"}
    assert ripple.decoders.get("confidence").Params.auxiliary_fields() == {}
    assert Drafter(DrafterParams(verifier="x", every=2)).auxiliary_models() == {"verifier": "x"}  # role: reference
    assert Drafter().auxiliary_models() == {} and ripple.decoders.build("confidence").auxiliary_models() == {}
    with pytest.raises(ValueError, match="accepted: causal_lm"):
        auxiliary("", kind="encoder")


def test_generate_runs_the_verifier_beside_the_dllm_and_counts_its_forwards_apart(golden):
    dream, verifier = str(golden / "dream-tiny"), str(golden / "qwen2-verifier-tiny")
    prompt = [5, 9, 17, 33, 41, 7]
    plain = ripple.generate(dream, prompt, "sequential", gen_length=16, block_length=8, dtype="float32")
    with CausalForwards() as seen:
        out = ripple.generate(dream, prompt, Drafter, gen_length=16, block_length=8, dtype="float32",
                              verifier=verifier, every=3)
    assert out.verifier_nfe == seen.n and 0 < seen.n < out.nfe  # every third step: fewer than the dLLM's
    assert out.tokens == plain.tokens and out.nfe == plain.nfe  # the verifier decides nothing here: same dLLM run
    assert out.to_dict()["verifier_nfe"] == seen.n and out.to_dict()["nfe"] == plain.nfe  # `--json`
    assert plain.verifier_nfe is None and plain.to_dict()["verifier_nfe"] is None  # no second model: empty


def test_the_cache_loads_each_verifier_once_per_folder_and_weights_on_the_dllms_dtype(golden, tmp_path, monkeypatch):
    import ripple.platform.runtime.auxiliary as aux_mod

    lm = load_model(str(golden / "dream-tiny"), dtype="bfloat16", device="cpu")
    loads, hashed = [], []
    real_digest = aux_mod.weights_digest
    monkeypatch.setattr(aux_mod, "weights_digest", lambda p: hashed.append(p) or real_digest(p))

    def loader(name, dtype, device):
        loads.append((name, dtype, device))
        return load_causal(name, dtype, device)

    models = AuxiliaryModels(lm, loader=loader)
    first = golden / "qwen2-verifier-tiny"
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    held = {}  # an engine's `auxiliary`: module by reference
    for every in (1, 2, 3):  # three configurations (cells) naming one verifier: one load, one hash
        dec = Drafter(DrafterParams(verifier=str(first), every=every))
        assert models.attach(dec, held) == {"verifier": weights_digest(first)}
        module = held[str(first)]
        assert module.causal and {p.dtype for p in module.parameters()} == {torch.bfloat16}  # the dLLM's dtype
        assert {p.device.type for p in module.parameters()} == {"cpu"}
    assert loads == [(str(first), "bfloat16", "cpu")] and len(hashed) == 1
    models.attach(Drafter(DrafterParams(verifier=str(copy))), held)
    assert len(loads) == 2 and held[str(first)] is not held[str(copy)]  # another folder: its own load
    before = held[str(copy)]

    weights = load_file(copy / "model.safetensors")  # the copy's weights change in place: a new digest, a new load
    weights["lm_head.weight"] = weights["lm_head.weight"] + 1e-3
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    c = Drafter(DrafterParams(verifier=str(copy)))
    assert models.attach(c, held) == {"verifier": weights_digest(copy)} != {"verifier": weights_digest(first)}
    assert len(loads) == 3 and held[str(copy)] is not before
    assert models.loads == 3


def test_a_verifier_that_cannot_serve_the_dllm_is_refused_in_one_line_before_decoding(golden, tmp_path):
    dream, verifier = str(golden / "dream-tiny"), str(golden / "qwen2-verifier-tiny")
    lines = write_verifier(tmp_path / "lines-tok", golden, tokenizer_of="ripple-tiny-lines")
    cases = {  # verifier, dLLM -> what the line says
        (dream, dream): "is a dream checkpoint, not a causal LM; accepted model_types: qwen2",
        (verifier, "ripple-tiny"): "scores 160 ids but the dLLM's vocabulary has 512",
        (str(lines), "ripple-tiny"): "where the dLLM spells",
        (str(tmp_path / "absent"), "ripple-tiny"): "not found",
    }
    for (name, model), says in cases.items():
        with CausalForwards() as seen, pytest.raises(ripple.RippleError) as err:
            ripple.generate(model, [5, 9, 17], Drafter, gen_length=8, block_length=8, dtype="float32",
                            verifier=name)
        msg = str(err.value)
        assert "\n" not in msg and says in msg and msg.startswith(f"decoder 'Drafter' hyperparameter verifier={name!r}")
        assert seen.n == 0  # nothing decoded, no verifier forward
    # a grid spec refuses them before any worker starts, naming the spec and the model
    base = {"models": ["ripple-tiny"], "tasks": ["arith"], "gen_lengths": [16], "block_lengths": [8]}
    with pytest.raises(ripple.RippleError, match=r"^grid spec .*hyperparameter verifier=.* on model 'ripple-tiny': "
                                                 r".*scores 160 ids but the dLLM's vocabulary has 512"):
        parse_spec({**base, "decoders": [Drafter(DrafterParams(verifier=verifier))]}, "g.yaml")
    with pytest.raises(ripple.RippleError, match="names no model: give a checkpoint directory, a hub id"):
        parse_spec({**base, "decoders": [Drafter(DrafterParams(verifier="no such model"))]}, "g.yaml")
    check_fit(EMBEDDED["ripple-tiny"], write_verifier(tmp_path / "fits", golden), "causal_lm")  # the fixture fits


def test_the_worker_loads_each_verifier_once_and_stamps_its_digest_on_every_record(golden, tmp_path):
    a, b = write_verifier(tmp_path / "a", golden, seed=1), write_verifier(tmp_path / "b", golden, seed=2)
    spec = parse_spec({"experiment": "aux", "models": ["ripple-tiny"], "tasks": {"arith": {"limit": 2}},
                       "decoders": ["confidence", Drafter(DrafterParams(verifier=str(a), every=1)),
                                    Drafter(DrafterParams(verifier=str(a), every=2)),
                                    Drafter(DrafterParams(verifier=str(b), every=1))],
                       "gen_lengths": [16], "block_lengths": [8], "dtype": "float32"}, "aux.yaml")
    worker = SampleWorker("ripple-tiny", dtype="float32", device="cpu")
    items = plan(spec, "aux", "r")
    records = []
    with CausalForwards() as seen:
        for cell in spec.cells:
            records += worker.run_batch([it for it in items if it.cell == cell])
    assert worker.aux.loads == 2  # a and b, once each: not per cell, not per sample
    assert all(r.error is None for r in records) and len(records) == 8
    digest = {str(a): weights_digest(a), str(b): weights_digest(b)}
    for r in records:
        named = json.loads(r.params).get("verifier")
        if named is None:
            assert r.decoder == "confidence" and r.aux_weights is None and r.verifier_nfe is None
        else:
            assert json.loads(r.aux_weights) == {"verifier": digest[named]} and r.verifier_nfe > 0
    assert sum(r.verifier_nfe or 0 for r in records) == seen.n

    store = ResultStore(tmp_path / "store", "aux")
    store.append(records)
    remedy = "re-run with --fresh"
    store.check_aux_weights(remedy)  # the same verifiers: the grid resumes
    weights = load_file(b / "model.safetensors")  # b is retrained: its cell's samples no longer stand
    weights["lm_head.weight"] = weights["lm_head.weight"] * 1.01
    save_file(weights, b / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ripple.RippleError) as err:
        store.check_aux_weights(remedy)
    assert str(err.value).endswith(f"second-model weights (verifier {digest[str(b)]}; now verifier "
                                   f"{weights_digest(b)}): {remedy}") and "\n" not in str(err.value)


def test_the_load_report_counts_the_dllm_and_the_verifier(golden, tmp_path):
    from ripple.bench.load_memory import load_parts
    from ripple.platform.runtime.loading import weight_bytes, weight_files

    a = write_verifier(tmp_path / "a", golden)
    parts = load_parts(str(EMBEDDED["ripple-tiny"]), Drafter, {"verifier": str(a)})
    assert [(role, folder) for role, folder, _ in parts] == [("dLLM", EMBEDDED["ripple-tiny"]), ("verifier", a)]
    assert [n for _, _, n in parts] == [weight_bytes(weight_files(f), torch.bfloat16) for _, f, _ in parts]
    assert len(load_parts(str(EMBEDDED["ripple-tiny"]), "confidence")) == 1


@pytest.mark.slow
def test_a_grid_on_ray_runs_the_verifier_on_its_workers_and_refuses_another_verifiers_samples(
        golden, tmp_path, ray_joined):
    """The same through `ripple.grid`: the decoder class pickled to a Ray worker, which loads the verifier
    beside ripple-tiny; the records carry its digest and `verifier_nfe`; after the verifier changes, resuming
    the experiment is one line and the store is untouched."""
    a = write_verifier(tmp_path / "a", golden, seed=3)
    spec = {"experiment": "aux", "models": ["ripple-tiny"], "tasks": {"arith": {"limit": 2}},
            "decoders": ["confidence", Drafter(DrafterParams(verifier=str(a), every=1)),
                         Drafter(DrafterParams(verifier=str(a), every=2))],
            "gen_lengths": [16], "block_lengths": [8], "dtype": "float32"}
    run = ripple.grid(spec, store=tmp_path / "store", track=False, workers=1)
    records = run.store.read()
    assert records.height == 6 and records["error"].null_count() == 6
    drafted = records.filter(records["decoder"] == "local:Drafter")
    assert set(drafted["aux_weights"]) == {json.dumps({"verifier": weights_digest(a)})}
    assert drafted["verifier_nfe"].min() > 0 and drafted["verifier_nfe"].max() <= drafted["nfe"].max()
    assert records.filter(records["decoder"] == "confidence")["verifier_nfe"].null_count() == 2
    assert "verifier NFE" in ripple.platform.experiments.grid.format_table(run)

    weights = load_file(a / "model.safetensors")
    weights["lm_head.weight"] = -weights["lm_head.weight"]
    save_file(weights, a / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ripple.RippleError, match=r"holds 2 samples of cell \w+ decoded beside other second-model "
                                                 r"weights \(verifier \w+; now verifier \w+\)"):
        ripple.grid(spec, store=tmp_path / "store", track=False, workers=1)
    assert run.store.read().equals(records)
