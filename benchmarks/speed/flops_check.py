"""Check `mnmt.models.accounting` FLOPs against XLA's count of the compiled step.

For each size, the training step (value_and_grad of the loss) and the forward pass are lowered
and compiled with `jax.jit(...).lower(...).compile().cost_analysis()`; their 'flops' are
compared with `train_flops_per_example` and the forward terms (× batch). XLA also counts
elementwise work (softmax, norms, GELU, loss), so its total is expected to be slightly above the
matmul-only analytic count; the script prints both the ratio and the matmul-only ratio
(XLA's `dot`/`convolution` FLOPs read from the optimized HLO).

    python benchmarks/speed/flops_check.py                       # mini-1 … mini-4, mini-dec-2
    python benchmarks/speed/flops_check.py --sizes mini-6 fernandes-1 --batch 8 --json

Only compilation happens (nothing is executed), so large sizes are fine on a laptop.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402

_DOT = re.compile(r"=\s*(\w+)\[([\d,]*)\][^\n]*?\s(dot|convolution)\(")


def _dot_flops(hlo_text: str) -> float:
    """Σ 2·(output elements)·(contracted size) over dot ops of an optimized HLO module."""
    total = 0.0
    shapes: dict[str, list[int]] = {}
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT\s+)?(%?[\w.\-]+)\s*=\s*\w+\[([\d,]*)\]", line)
        if m:
            shapes[m.group(1).lstrip("%")] = [int(x) for x in m.group(2).split(",") if x]
    for line in hlo_text.splitlines():
        if " dot(" not in line:
            continue
        m = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*\w+\[([\d,]*)\]", line)
        ops = re.search(r"dot\(([^)]*)\)", line)
        cdims = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
        if not (m and ops and cdims):
            continue
        out = [int(x) for x in m.group(1).split(",") if x]
        lhs_name = ops.group(1).split(",")[0].strip().split(" ")[-1].lstrip("%")
        lhs = shapes.get(lhs_name)
        if lhs is None:
            continue
        k = 1
        for d in (int(x) for x in cdims.group(1).split(",") if x):
            k *= lhs[d]
        n = 1
        for d in out:
            n *= d
        total += 2.0 * n * k
    return total


def _flops(compiled) -> float:
    ca = compiled.cost_analysis()
    if isinstance(ca, list | tuple):
        ca = ca[0]
    return float(ca.get("flops", float("nan")))


def check(size: str, batch: int, input_len: int, target_len: int, vocab: int | None) -> dict:
    import jax
    import numpy as np

    from mnmt.models import accounting, zoo

    config = zoo.get_config(size, vocab)
    if config.is_decoder_only:
        from mnmt.models.decoder_only import DecoderOnlyModel
        model = DecoderOnlyModel(config)
        n = input_len + target_len
        ids = np.ones((batch, n), np.int32)
        b = {"decoder_input_tokens": ids, "decoder_target_tokens": ids,
             "decoder_loss_weights": np.ones((batch, n), np.float32)}
    else:
        from mnmt.models.encoder_decoder import EncoderDecoderModel
        model = EncoderDecoderModel(config)
        b = {"encoder_input_tokens": np.ones((batch, input_len), np.int32),
             "decoder_input_tokens": np.ones((batch, target_len), np.int32),
             "decoder_target_tokens": np.ones((batch, target_len), np.int32),
             "decoder_loss_weights": np.ones((batch, target_len), np.float32)}
    params = jax.eval_shape(lambda: model.init_params(jax.random.PRNGKey(0), b))
    t0 = time.perf_counter()
    train = jax.jit(jax.value_and_grad(lambda p, x: model.loss_fn(p, x, None)[0])).lower(
        params, b).compile()
    fwd = jax.jit(lambda p, x: model.loss_fn(p, x, None)[0]).lower(params, b).compile()
    compile_s = time.perf_counter() - t0
    analytic_train = accounting.train_flops_per_example(config, input_len, target_len) * batch
    analytic_fwd = sum(accounting.forward_flops_terms(config, input_len, target_len).values()) \
        * batch
    six_n = accounting.six_n_flops_per_example(config, input_len, target_len) * batch
    xla_train, xla_fwd = _flops(train), _flops(fwd)
    dots_train, dots_fwd = _dot_flops(train.as_text()), _dot_flops(fwd.as_text())
    return {
        "size": size, "batch": batch, "input_len": input_len, "target_len": target_len,
        "vocab_size": config.vocab_size,
        "non_embedding_params": accounting.param_counts(config).non_embedding,
        "analytic_train_flops": analytic_train, "xla_train_flops": xla_train,
        "xla_train_dot_flops": dots_train, "six_n_flops": six_n,
        "ratio_xla_over_analytic": xla_train / analytic_train,
        "ratio_xla_dots_over_analytic": dots_train / analytic_train,
        "ratio_six_n_over_analytic": six_n / analytic_train,
        "analytic_forward_flops": analytic_fwd, "xla_forward_flops": xla_fwd,
        "xla_forward_dot_flops": dots_fwd,
        "ratio_forward_dots_over_analytic": dots_fwd / analytic_fwd,
        "compile_seconds": compile_s,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", nargs="+",
                   default=["mini-1", "mini-2", "mini-3", "mini-4", "mini-dec-2"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--input_len", type=int, default=64)
    p.add_argument("--target_len", type=int, default=64)
    p.add_argument("--vocab_size", type=int, default=None)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    import jax

    rows = [check(s, a.batch, a.input_len, a.target_len, a.vocab_size) for s in a.sizes]
    meta = {**machine({"arch": "machine", "cpus": "cpus", "load_avg": "load_avg"}),
            "jax": jax.__version__, "backend": jax.default_backend(),
            "python": sys.version.split()[0]}
    if a.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=1))
        return 0
    print(f"# {meta}")
    print(f"{'size':<12}{'analytic':>12}{'xla total':>12}{'xla dots':>12}{'6N':>12}"
          f"{'xla/an':>8}{'dots/an':>8}{'6N/an':>8}{'fwd dots/an':>12}")
    for r in rows:
        print(f"{r['size']:<12}{r['analytic_train_flops']:>12.4g}{r['xla_train_flops']:>12.4g}"
              f"{r['xla_train_dot_flops']:>12.4g}{r['six_n_flops']:>12.4g}"
              f"{r['ratio_xla_over_analytic']:>8.3f}{r['ratio_xla_dots_over_analytic']:>8.3f}"
              f"{r['ratio_six_n_over_analytic']:>8.3f}{r['ratio_forward_dots_over_analytic']:>12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
