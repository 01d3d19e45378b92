"""XLA:CPU backend optimisation levels: compile time against step time of a small training step.

The test suite compiles hundreds of tiny programs and runs most of them for a few steps, so the
level it compiles at trades compile time against run time (tests/conftest.py's `compile_fast`).
Each setting runs in its own process on one core (`taskset`-style affinity, XLA's single-thread
pool), with no persistent compilation cache: the first step's time is tracing + compiling the
init and step programs + one step; then the mean of `--steps` steps.

    python benchmarks/speed/xla_opt_level.py                      # mini-1 and micro-1, four settings
    python benchmarks/speed/xla_opt_level.py --sizes mini-1 --rounds 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402

SETTINGS = {
    "default": "",
    "level 2": "--xla_backend_optimization_level=2",
    "level 1": "--xla_backend_optimization_level=1",
    "level 0, no expensive passes": ("--xla_backend_optimization_level=0 "
                                     "--xla_llvm_disable_expensive_passes=true"),
}
BATCH, LENGTH, VOCAB = 48, 36, 704  # the default study's batch, feature lengths and vocabulary


def child(size: str, steps: int) -> dict:
    """Time one setting (the XLA_FLAGS this process was started with)."""
    import jax
    from train_step import random_batch

    from mnmt.models.encoder_decoder import EncoderDecoderModel
    from mnmt.models.zoo import get_config
    from mnmt.training.step_functions import put_global_batch, single_device_step_functions

    model = EncoderDecoderModel(get_config(size, VOCAB))
    batch = random_batch(BATCH, LENGTH, LENGTH, VOCAB)
    start = time.perf_counter()
    fns = single_device_step_functions(model, batch, z_loss=1e-4)
    state = fns.init(jax.random.PRNGKey(0))
    device_batch = put_global_batch(batch, fns.batch_sharding)
    state, metrics = fns.step(state, device_batch)
    jax.block_until_ready(metrics["loss"])
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = fns.step(state, device_batch)
    jax.block_until_ready(metrics["loss"])
    return {"first_step_s": first, "step_ms": (time.perf_counter() - start) / steps * 1e3,
            "loss": float(metrics["loss"])}


def measure(size: str, flags: str, steps: int) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"{flags} --xla_cpu_multi_thread_eigen=false".strip())
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", size, "--steps", str(steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["mini-1", "micro-1"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2, help="each setting this many times, "
                        "interleaved; the best of each is reported")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return 0
    info = machine()
    if not args.json:
        print(f"{info['cpu_model']}, {info['cpus']} cores, load average {info['load_avg']}")
    results = []
    for size in args.sizes:
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name, flags in SETTINGS.items():
                got = measure(size, flags, args.steps)
                old = best.setdefault(name, got)
                best[name] = {k: min(old[k], got[k]) for k in ("first_step_s", "step_ms")}
                best[name]["loss"] = got["loss"]
        for name, got in best.items():
            results.append({"size": size, "setting": name, **got})
            if not args.json:
                print(f"{size:8s} {name:30s} first step {got['first_step_s']:6.1f} s  "
                      f"step {got['step_ms']:7.1f} ms  loss {got['loss']:.4f}")
    if args.json:
        print(json.dumps({"machine": info, "load_avg_after": os.getloadavg(),
                          "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
