"""Training one model (T5X's trainer and train roles), one module per concern.

- ``config``: `TrainConfig` and its grouped sections (optimizer, inputs, eval, decode, checkpoint),
  gin; light (no jax), so studies can check field names without JAX;
- ``trainer``: `train(config) -> TrainSummary`, resumable at any step; groups and branches;
- ``loop``: the training loop of one group of runs (steps, evaluation, checkpoints, run files);
- ``run_setup``: what a run derives from its config (model, mesh, shardings, inputs, run.json);
- ``step_functions``: the jitted, sharded init / train-step functions;
- ``host_inputs``: this host's shard of the input pipeline, prefetched, checkpointable;
- ``optimizer``: Adafactor + the rsqrt / warm-up–stable–decay schedules (optax);
- ``branches``: cool-down branches — several budgets D from one run (configuration, no jax);
- ``checkpoints``: Orbax checkpoints (atomic, keep-N) and the SIGTERM/SIGINT guard;
- ``evaluation``: teacher-forced per-pair loss; beam search scored with BLEU/ChrF;
- ``run_files``: run.json and the append-only metrics.jsonl;
- ``progress``: progress events, rates/MFU/ETA, TensorBoard writers;
- ``distributed``: multi-host start-up (`jax.distributed.initialize`);
- ``train``: the `mnmt-train` entry point (gin files and flags).

Importing this package is light; its modules import JAX, Flax and SeqIO.
"""
