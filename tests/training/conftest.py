"""Shared fixtures of the trainer tests: a tiny vocabulary, registered tasks, a run factory."""

from __future__ import annotations

import pytest
from run_helpers import LENGTHS


@pytest.fixture(scope="session", autouse=True)
def _compilation_cache(tmp_path_factory):
    """Share XLA executables between the many small runs of these tests (same shapes): in the
    suite's cache (tests/conftest.py ``share_compiled_programs``: both workers and every test
    folder) where it is on, else in one of this session's own."""
    import os

    import jax

    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(tmp_path_factory.mktemp("xla_cache"))
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    yield


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """cpu-tiny tasks registered with a 512-piece vocabulary trained once per session."""
    from mnmt.data import mixtures, synthetic, tasks, vocab

    out = tmp_path_factory.mktemp("vocab")
    family = synthetic.get_family("cpu-tiny")
    path = vocab.train_vocabulary(family, str(out), 512, n_per_pair=2000)
    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", path, eval_size=24)
    mixture = mixtures.register_weighted_mixture(
        "trainer_test_p50", {t: 0.5 for t in pair_tasks.values()})
    return {"vocab": path, "tasks": pair_tasks, "mixture": mixture}


@pytest.fixture
def make_config(tiny_data, tmp_path):
    """TrainConfig factory for a tiny mini-1 run in a fresh directory (overridable fields)."""
    from mnmt.training.config import (
        CheckpointConfig,
        DecodeConfig,
        EvalConfig,
        InputConfig,
        TrainConfig,
    )

    def make(name: str = "run", **overrides):
        """Overrides: TrainConfig fields; a section (inputs, eval, …) as a dict of its fields."""
        base = TrainConfig(
            model_dir=str(tmp_path / name), model_size="mini-1",
            vocabulary_path=tiny_data["vocab"], train_steps=12,
            inputs=InputConfig(mixture_or_task_name=tiny_data["mixture"],
                               feature_lengths=dict(LENGTHS), batch_size=8),
            eval=EvalConfig(tasks=dict(tiny_data["tasks"]), period=6, batch_size=16),
            decode=DecodeConfig(at_end=False, num_examples=8),
            checkpoint=CheckpointConfig(period=4),
            log_every=2, warmup_steps=4, learning_rate=0.5, tensorboard=False, peak_flops=1e9)
        return base.updated(**overrides)

    return make
