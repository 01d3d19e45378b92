"""Helpers of the training tests (a module of its own: `conftest` names clash across folders)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from mnmt.training import run_files

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


def assert_same_metrics(a_dir, b_dir, rtol=1e-4):
    """Two run directories hold the same metric rows (no duplicates, none missing), values
    within rtol, and the same token counts: a resumed run against an uninterrupted one."""
    a = run_files.read_metrics(a_dir)
    b = run_files.read_metrics(b_dir)
    ka = [(r["step"], r["task"], r["eval_set"], r["metric"]) for r in a]
    kb = [(r["step"], r["task"], r["eval_set"], r["metric"]) for r in b]
    assert len(kb) == len(set(kb)), "duplicate rows after resume"
    assert sorted(ka) == sorted(kb), "missing or extra rows after resume"
    ra, rb = rows_by_key(a), rows_by_key(b)
    for k in ka:
        assert rb[k] == pytest.approx(ra[k], rel=rtol, abs=1e-6), k
    ta = {(r["step"], r["metric"]): r["tokens"] for r in a}
    tb = {(r["step"], r["metric"]): r["tokens"] for r in b}
    assert ta == tb


def cut_back(model_dir: str, checkpoint: int, rows: int | None = None) -> None:
    """As if killed after writing the rows of step ``rows`` (default ``checkpoint``), the last
    checkpoint at step ``checkpoint``: later checkpoints and rows gone, the run unfinished."""
    rows = checkpoint if rows is None else rows
    ckpt = os.path.join(model_dir, "checkpoints")
    for name in os.listdir(ckpt):
        if name.startswith("step_") and int(name.split("_")[1]) > checkpoint:
            shutil.rmtree(os.path.join(ckpt, name))
    path = os.path.join(model_dir, "metrics.jsonl")
    with open(path) as f:
        kept = [line for line in f if json.loads(line)["step"] <= rows]
    with open(path, "w") as f:
        f.writelines(kept)
    run = run_files.read_run_json(model_dir)
    run_files.write_run_json(model_dir, {**run, "status": "running"})
