"""Measurement, one room above the platform (DESIGN.md section 1): everything that times or
checks the runtime and the experiment system rather than extending them. Nothing below
(platform, decoders, tasks) imports it.

cli.py                `python -m ripple.bench` (`make bench`, `make batch-equivalence`): parser and report
presets.py            random-weight models of real shapes, the one table `--preset` and the tests read
timing.py             medians of device-synchronised runs; the machine line
forwards.py           engine forwards: the packed lookahead against a plain forward, per cache policy
moe_layer.py          one LLaDA2.0-mini MoE layer: the grouped forward against a per-expert loop
grid_overhead.py      the demo grid through Ray local mode against one process
batch_throughput.py   throughput mode: the demo grid's samples per second at batch 1, 4 and 8
batch_equivalence.py  every demo-grid sample batched against batch 1: same tokens and NFE
preset_report.py      `--preset NAME`: forwards, lookaheads and decode TPS at a paper's setting (GPU)
canvas_report.py      `--preset diffusion-gemma-26b`: a uniform-noise family's passes and peak memory
random_checkpoint.py  `--write-checkpoint DIR`: a random-weight checkpoint in the real format
load_memory.py        `--load-memory DIR`: peak memory of loading and decoding against weight bytes
"""
