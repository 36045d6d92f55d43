"""Shared by the engine-segment tests (shadow, next-block rows): golden engines and a canvas
caught mid-way through a block."""
import pytest
import torch

from ripple.platform.runtime.engine import Engine
from ripple.platform.runtime.loading import load_model

L = 8  # block length of every case here


@pytest.fixture(scope="module", params=["llada-tiny", "dream-tiny"])
def engine(request, golden):
    return Engine.from_loaded(load_model(str(golden / request.param), "float32", "cpu"))


def mid_block_canvas(engine, gen: int, prompt_len=12, block=1, decoded=(0, 2, 3, 6), seed=0):
    """A canvas mid-way through `block`: earlier blocks and some block positions decoded.
    Returns canvas [1, N], positions [1, N], padding [1, N] and the block's start."""
    g = torch.Generator().manual_seed(seed)
    N = prompt_len + gen
    canvas = torch.full((1, N), engine.mask_id)
    bs = prompt_len + block * L
    canvas[0, :bs] = torch.randint(0, 140, (bs,), generator=g)
    for j in decoded:
        canvas[0, bs + j] = int(torch.randint(0, 140, (), generator=g))
    return canvas, torch.arange(N)[None], torch.zeros(1, N, dtype=torch.bool), bs
