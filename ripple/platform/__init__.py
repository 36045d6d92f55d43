"""The platform, in three rooms (DESIGN.md section 1):

runtime/      the inference runtime: model families (models/), weights loading, the denoising
              engine (canvas, block loop, KV cache policies, packed lookahead, shadow); it
              knows nothing of Ray, stores or tasks' scoring.
experiments/  the Ray experiment system: grid specs, worker actors, the grid driver, the
              Parquet result store, MLflow tracking, the metrics module every surface calls,
              one-cell evaluation, the demo grid, shipped grids/*.yaml.
training/     `ripple train-tiny`: the embedded model's tokenizer and training loop.

Imports run runtime <- training, runtime <- experiments; never the other way. What measures
the platform (`make bench`, presets, batch equivalence) is `ripple.bench`, a room above it.
"""
