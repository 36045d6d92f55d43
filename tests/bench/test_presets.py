"""The presets have the real models' shapes: a preset's config, read by its family, builds the
module a downloaded checkpoint would."""
from ripple.bench.presets import LLADA_8B, PRESETS
from ripple.platform.runtime.models.llada import LLADA


def test_the_llada_8b_preset_has_the_real_models_shapes():
    cfg = LLADA.to_config(PRESETS["llada-8b"].config)
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.mlp_hidden, cfg.vocab_size) == \
        (4096, 32, 32, 32, 12288, 126464)
    assert (cfg.rope_theta, cfg.norm_eps, LLADA_8B["mask_token_id"]) == (500000.0, 1e-5, 126336)
    params = 2 * cfg.vocab_size * cfg.d_model + cfg.n_layers * (4 * cfg.d_model ** 2 + 3 * cfg.d_model * cfg.mlp_hidden)
    assert 8.0e9 < params < 8.1e9  # LLaDA-8B: 8.02 B parameters
    p = PRESETS["llada-8b"]
    assert (p.gen_length, p.block_length) == (256, 32)


def test_the_llada2_mini_preset_has_the_real_models_shapes():
    from ripple.platform.runtime.models.llada2 import LLADA2

    cfg = LLADA2.to_config(PRESETS["llada2-mini"].config)
    moe = cfg.moe
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rotary_dim, cfg.mlp_hidden,
            cfg.vocab_size, cfg.dense_layers) == (2048, 20, 16, 4, 128, 64, 5120, 157184, 1)
    assert (moe.n_experts, moe.top_k, moe.n_group, moe.topk_group, moe.hidden, moe.n_shared) == (256, 8, 8, 4, 512, 1)
    d, attn = cfg.d_model, (16 + 2 * 4) * 128 * cfg.d_model + 16 * 128 * cfg.d_model
    total = 2 * 157184 * d + 20 * attn + 3 * d * 5120 + 19 * (3 * d * 512 * 257 + 256 * d)
    active = 2 * 157184 * d + 20 * attn + 3 * d * 5120 + 19 * (3 * d * 512 * 9 + 256 * d)
    assert 16.0e9 < total < 16.5e9 and 1.35e9 < active < 1.5e9  # LLaDA2.0-mini: 16 B total, 1.4 B active
    import torch

    with torch.device("meta"):
        model = LLADA2.build(cfg)
    norms = 2 * 20 * d + 20 * 2 * 128 + d + 19 * 256  # RMSNorm weights (two a layer, q/k, final); expert_bias
    assert sum(p.numel() for p in model.parameters()) == total + norms  # the module built from the preset


def test_the_sdar_8b_preset_has_the_real_models_shapes():
    import torch

    from ripple.platform.runtime.models.sdar import SDAR

    cfg = SDAR.to_config(PRESETS["sdar-8b"].config)
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.mlp_hidden, cfg.vocab_size) == \
        (4096, 36, 32, 8, 128, 12288, 151936)
    assert cfg.qk_norm and cfg.rotary_dim == 128 and cfg.rope_theta == 1e6 and cfg.moe is None
    d = cfg.d_model
    total = 2 * 151936 * d + 36 * ((32 + 2 * 8) * 128 * d + 32 * 128 * d + 3 * d * 12288)
    assert 8.1e9 < total < 8.3e9  # Qwen3-8B / SDAR-8B: 8.2 B parameters
    with torch.device("meta"):
        model = SDAR.build(cfg)
    norms = 36 * (2 * d + 2 * 128) + d  # RMSNorm weights: two a layer, q and k per head, the final one
    assert sum(p.numel() for p in model.parameters()) == total + norms and model.block_causal
    p = PRESETS["sdar-8b"]
    assert (p.gen_length, p.block_length) == (256, 4)


def test_the_diffusion_gemma_preset_has_the_real_shapes_in_two_layers():
    """google/diffusiongemma-26B-A4B-it's values (../shared/golden/README.md): the full config builds a
    25.2 B-parameter text model (the vision tower, about 0.5 B more, is not loaded); the preset keeps one
    layer of each attention kind."""
    import torch

    from ripple.bench.presets import DIFFUSION_GEMMA_26B
    from ripple.platform.runtime.models.diffusion_gemma import DIFFUSION_GEMMA

    full = DIFFUSION_GEMMA.to_config(DIFFUSION_GEMMA_26B)
    assert (full.d_model, full.n_layers, full.n_heads, full.vocab_size, full.mlp_hidden, full.sliding_window,
            full.canvas_length, full.softcap) == (2816, 30, 16, 262144, 2112, 1024, 256, 30.0)
    assert [s.sliding for s in full.layers] == ([True] * 5 + [False]) * 5
    assert {(s.head_dim, s.kv_heads, s.rotated_pairs) for s in full.layers} == {(256, 8, 128), (512, 2, 64)}
    assert (full.moe.n_experts, full.moe.top_k, full.moe.hidden) == (128, 8, 704)
    with torch.device("meta"):
        total = sum(p.numel() for p in DIFFUSION_GEMMA.build(full).parameters())
    assert 25.0e9 < total < 25.5e9
    p = PRESETS["diffusion-gemma-26b"]
    two = DIFFUSION_GEMMA.to_config(p.config)
    assert [s.sliding for s in two.layers] == [True, False] and two.layers == (full.layers[0], full.layers[5])
    assert (p.prompt_tokens, p.block_length) == (64, full.canvas_length)


def test_the_fast_dllm_v2_preset_has_the_real_shapes_in_two_layers():
    """Fast_dLLM_v2_7B's values (../shared/golden/README.md "fast-dllm-v2-tiny"): the full config builds
    Qwen2.5-7B's 7.6 B parameters; the preset keeps two of its 28 layers."""
    import torch

    from ripple.bench.presets import FAST_DLLM_V2_7B
    from ripple.platform.runtime.models.fast_dllm_v2 import FAST_DLLM_V2

    full = FAST_DLLM_V2.to_config(FAST_DLLM_V2_7B)
    assert (full.d_model, full.n_layers, full.n_heads, full.n_kv_heads, full.head_dim, full.mlp_hidden,
            full.vocab_size, full.rope_theta) == (3584, 28, 28, 4, 128, 18944, 152064, 1e6)
    with torch.device("meta"):
        total = sum(p.numel() for p in FAST_DLLM_V2.build(full).parameters())
        two = FAST_DLLM_V2.build(FAST_DLLM_V2.to_config(PRESETS["fast-dllm-v2-7b"].config))
    assert 7.5e9 < total < 7.7e9 and two.cfg.n_layers == 2 and two.block_causal and two.shift == 1
    assert 1.5e9 < sum(p.numel() for p in two.parameters()) < 1.6e9
    assert PRESETS["fast-dllm-v2-7b"].block_length == FAST_DLLM_V2_7B["bd_size"] == 32
