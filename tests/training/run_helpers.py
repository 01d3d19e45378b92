"""Helpers of the training tests (a module of its own: `conftest` names clash across folders)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

LENGTHS = {"inputs": 16, "targets": 16}
HERE = os.path.dirname(os.path.abspath(__file__))  # holds _child_run.py


def small_run_config(tiny_data, model_dir, run_id: str, *, seed: int = 0,
                     checkpoint_period: int = 4):
    """The 12-step mini-1 run of the fault tests: eval every 6 steps, a checkpoint every
    ``checkpoint_period``, no decoding or TensorBoard (fast enough to train several times)."""
    from mnmt.training.config import (  # heavy: jax, optax
        CheckpointConfig,
        DecodeConfig,
        EvalConfig,
        InputConfig,
        TrainConfig,
    )

    return TrainConfig(
        model_dir=str(model_dir), model_size="mini-1", vocabulary_path=tiny_data["vocab"],
        train_steps=12,
        inputs=InputConfig(mixture_or_task_name=tiny_data["mixture"],
                           feature_lengths=dict(LENGTHS), batch_size=8),
        eval=EvalConfig(tasks=dict(tiny_data["tasks"]), period=6, batch_size=16),
        decode=DecodeConfig(at_end=False), checkpoint=CheckpointConfig(period=checkpoint_period),
        log_every=2, warmup_steps=4, learning_rate=0.5, tensorboard=False, peak_flops=1e9,
        run_id=run_id, seed=seed)


def rows_by_key(rows):
    return {(r["step"], r["task"], r["eval_set"], r["metric"]): r["value"] for r in rows}


def write_child_spec(config, tiny_data, tmp_path, group=None, **extra) -> str:
    """A JSON file from which `_child_run.py` rebuilds `config` (or, with `group`, trains those
    configs as one group) in a fresh process."""

    def as_dict(c):
        d = c.to_dict()
        d["optimizer"] = None
        return d

    spec = {"config": as_dict(config), "vocab": tiny_data["vocab"], "eval_size": 24,
            "mixture": tiny_data["mixture"], **extra}
    if group is not None:
        spec["group"] = [as_dict(c) for c in group]
    path = tmp_path / f"spec_{random.random():.6f}.json"
    path.write_text(json.dumps(spec))
    return str(path)


def run_child(spec_path: str, timeout: int = 240,
              extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `_child_run.py SPEC` in a fresh process sharing this session's compilation cache."""
    import jax

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path),
               JAX_COMPILATION_CACHE_DIR=str(jax.config.jax_compilation_cache_dir or ""),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", **(extra_env or {}))
    return subprocess.run([sys.executable, os.path.join(HERE, "_child_run.py"), spec_path],
                          capture_output=True, text=True, timeout=timeout, env=env)
