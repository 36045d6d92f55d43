"""The platform, in three rooms (DESIGN.md section 1):

runtime/      the inference runtime: model families (models/), weights loading, the denoising
              engine (canvas, block loop, KV cache policies, packed lookahead, shadow) and the
              forward benchmarks; it knows nothing of Ray, stores or tasks' scoring.
experiments/  the Ray experiment system: grid specs, worker actors, the grid driver, the
              Parquet result store, MLflow tracking, the metrics module every surface calls,
              one-cell evaluation, the demo, throughput benchmarks, shipped grids/*.yaml.
training/     `ripple train-tiny`: the embedded model's tokenizer and training loop.
bench.py      `make bench`: measurements across the rooms (`python -m ripple.platform.bench`).

Imports run runtime <- training, runtime <- experiments; never the other way.
"""
