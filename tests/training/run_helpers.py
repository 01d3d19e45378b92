"""Helpers of the training tests (a module of its own: `conftest` names clash across folders)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

LENGTHS = {"inputs": 16, "targets": 16}
HERE = os.path.dirname(os.path.abspath(__file__))  # holds _child_run.py


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
