"""float32 matmul throughput of the training step's shapes: XLA:CPU (JAX) against PyTorch.

The reference training step of `benchmarks/speed/train_step.py` (d_model 256, d_ff 1024, vocab 8000,
batch 32 × 64 target tokens = 2048 rows) spends most of its time in a few matmul shapes. This
script times each of them, forward (NN) and the two backward products (dX = dY·Wᵀ, dW = Xᵀ·dY),
in JAX (jit) and in PyTorch with the same number of threads, so the train-step ratio can be read
against what the two matmul libraries do on this machine.

    python benchmarks/speed/matmul_shapes.py            # table
    python benchmarks/speed/matmul_shapes.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

# (rows, in, out): the step's projection shapes at 2048 rows
SHAPES = {
    "attention q/k/v/o (256→256)": (2048, 256, 256),
    "mlp wi (256→1024)": (2048, 256, 1024),
    "mlp wo (1024→256)": (2048, 1024, 256),
    "logits (256→8000)": (2048, 256, 8000),
    "square 2048³ (peak)": (2048, 2048, 2048),
}


def _best_ms(fn, sync, repeats: int, windows: int = 3) -> float:
    sync(fn())
    best = float("inf")
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(repeats):
            out = fn()
        sync(out)
        best = min(best, (time.perf_counter() - t0) / repeats)
    return best * 1e3


def measure(repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from train_step import cpu_model, usable_cpus  # same folder: run as a script

    threads = usable_cpus()
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    products = {
        "fwd Y=X·W": (lambda x, w, g: x @ w, lambda x, w, g: x @ w),
        "bwd dX=dY·Wᵀ": (lambda x, w, g: g @ w.T, lambda x, w, g: g @ w.T),
        "bwd dW=Xᵀ·dY": (lambda x, w, g: x.T @ g, lambda x, w, g: x.T @ g),
    }
    rows = []
    for name, (m, k, n) in SHAPES.items():
        x, w, g = (rng.standard_normal(s, dtype=np.float32) for s in ((m, k), (k, n), (m, n)))
        jx, jw, jg = (jnp.asarray(a) for a in (x, w, g))
        tx, tw, tg = (torch.from_numpy(a) for a in (x, w, g))
        gflop = 2.0 * m * k * n / 1e9
        for prod, (jf, tf) in products.items():
            f = jax.jit(jf)
            j_ms = _best_ms(lambda f=f, a=(jx, jw, jg): f(*a), jax.block_until_ready, repeats)
            t_ms = _best_ms(lambda tf=tf, a=(tx, tw, tg): tf(*a), lambda _: None, repeats)
            rows.append({"shape": name, "product": prod, "m_k_n": [m, k, n],
                         "jax_gflops": gflop / j_ms * 1e3, "torch_gflops": gflop / t_ms * 1e3,
                         "jax_over_torch": t_ms / j_ms})
    return {"machine": f"{platform.machine()} {threads} usable cpus, {cpu_model()}, "
                       f"{platform.platform()}",
            "load_average": [round(v, 2) for v in os.getloadavg()],
            "versions": {"jax": jax.__version__, "torch": torch.__version__}, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args(argv)
    result = measure(args.repeats)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"machine: {result['machine']}; load average {result['load_average']}; "
          f"{result['versions']}")
    print(f"{'shape':30s} {'product':14s} {'JAX GFLOP/s':>12s} {'torch GFLOP/s':>14s} {'JAX/torch':>10s}")
    for r in result["rows"]:
        print(f"{r['shape']:30s} {r['product']:14s} {r['jax_gflops']:12.1f} "
              f"{r['torch_gflops']:14.1f} {r['jax_over_torch']:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
