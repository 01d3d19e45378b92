"""Training-step speed and memory: mnmt (JAX/Flax) against HF transformers' T5 on PyTorch.

The reference configuration: d_model 256, 2+2 layers, d_ff 1024 gated-GELU, 4 heads
of dim 64, vocabulary 8000, untied logits, dropout 0, batch 32 × (64 source + 64 target)
tokens, float32, Adafactor on both sides. Each side runs in its own subprocess (so peak RSS is
its own), alternating `--rounds` times; the best steps/s of each is reported, with the load
average around every measurement. Tokens/s count source + target tokens.

    python benchmarks/speed/train_step.py            # human-readable
    python benchmarks/speed/train_step.py --json     # one JSON object
    python benchmarks/speed/train_step.py --zoo      # also tokens/s and MFU for mini-1 … mini-8
    python benchmarks/speed/train_step.py --breakdown  # forward / backward / matmuls-only split

MFU = model FLOPs per second (mnmt.models.accounting.train_flops_per_example) over the measured
float32 matmul peak of this machine (best of several 2048² matmuls, all cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time

REF = dict(vocab=8000, d_model=256, layers=2, d_ff=1024, heads=4, head_dim=64,
           batch=32, src_len=64, tgt_len=64)


def random_batch(batch: int, src: int, tgt: int, vocab: int, seed: int = 0):
    """One batch of T5X encoder-decoder features, random tokens ≥ 2 (no padding, no EOS)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    enc = rng.integers(2, vocab, size=(batch, src), dtype=np.int32)
    tgt_tokens = rng.integers(2, vocab, size=(batch, tgt), dtype=np.int32)
    dec_in = np.concatenate([np.zeros((batch, 1), np.int32), tgt_tokens[:, :-1]], axis=1)
    return {"encoder_input_tokens": enc, "decoder_input_tokens": dec_in,
            "decoder_target_tokens": tgt_tokens,
            "decoder_loss_weights": np.ones((batch, tgt), np.float32)}


def usable_cpus() -> int:
    """CPUs this process may run on (honours taskset / cgroup affinity, like XLA's pool)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_steps(run_step, steps: int, warmup: int) -> float:
    """Seconds per step: the best of 3 windows of `steps` steps after `warmup` steps."""
    for _ in range(warmup):
        run_step()
    best = float("inf")
    # best of 3 windows of `steps` steps: robust to other processes on a shared machine
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            run_step()
        best = min(best, (time.perf_counter() - t0) / steps)
    return best


def step_matmuls(batch: int, src: int, tgt: int) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """Every matmul of one training step of the reference model, as (form, lhs, rhs) shapes.

    A projection X[m,k]·W[k,n] costs three products: the forward "nn" Y = X·W, dX = dY·Wᵀ
    ("nt": rhs contracted on its last axis) and dW = Xᵀ·dY ("tn": lhs contracted on its first
    axis). An attention module costs six batched products ("bnn"/"bnt"/"btn"): the scores Q·Kᵀ
    and P·V forward, and dP, dV, dQ, dK backward. Same list for both frameworks, so timing it
    alone gives each step's matmul-only time: the floor no fusion or scheduling can go below.
    """
    d, f, v = REF["d_model"], REF["d_ff"], REF["vocab"]
    hd, bh = REF["heads"] * REF["head_dim"], batch * REF["heads"]
    ms, mt = batch * src, batch * tgt
    proj = []  # (rows, in, out)
    for _ in range(REF["layers"]):  # encoder: self-attention q, k, v, o; gated MLP wi_0, wi_1, wo
        proj += [(ms, d, hd)] * 3 + [(ms, hd, d), (ms, d, f), (ms, d, f), (ms, f, d)]
    for _ in range(REF["layers"]):  # decoder: self-attention, cross-attention (k, v on the
        proj += [(mt, d, hd)] * 3 + [(mt, hd, d)]  # encoder's rows), gated MLP
        proj += [(mt, d, hd), (ms, d, hd), (ms, d, hd), (mt, hd, d)]
        proj += [(mt, d, f), (mt, d, f), (mt, f, d)]
    proj.append((mt, d, v))  # untied logits
    out = []
    for m, k, n in proj:
        out += [("nn", (m, k), (k, n)), ("nt", (m, n), (k, n)), ("tn", (m, k), (m, n))]
    dh = REF["head_dim"]
    attention = [(src, src)] * REF["layers"] + [(tgt, tgt), (tgt, src)] * REF["layers"]
    for q, kv in attention:
        out += [("bnt", (bh, q, dh), (bh, kv, dh)),    # S = Q·Kᵀ
                ("bnn", (bh, q, kv), (bh, kv, dh)),    # O = P·V
                ("bnt", (bh, q, dh), (bh, kv, dh)),    # dP = dO·Vᵀ
                ("btn", (bh, q, kv), (bh, q, dh)),     # dV = Pᵀ·dO
                ("bnn", (bh, q, kv), (bh, kv, dh)),    # dQ = dS·K
                ("btn", (bh, q, kv), (bh, q, dh))]     # dK = dSᵀ·Q
    return out


def _matmul(form: str, a, b):
    """The product of `step_matmuls` form `form` (numpy, jax and torch arrays alike)."""
    if form.endswith("nn"):
        return a @ b
    if form.endswith("nt"):
        return a @ b.swapaxes(-1, -2)
    return a.swapaxes(-1, -2) @ b


def _matmul_flops(form: str, lhs: tuple[int, ...], rhs: tuple[int, ...]) -> float:
    """2 × (all of lhs) × (rhs's output axis): the FLOPs of a `step_matmuls` product."""
    out_axis = rhs[-2] if form.endswith("nt") else rhs[-1]
    return 2.0 * math.prod(lhs) * out_axis


def _matmul_inputs(batch: int, src: int, tgt: int):
    import numpy as np

    rng = np.random.default_rng(1)
    return [(form, rng.standard_normal(sa, dtype=np.float32), rng.standard_normal(sb, dtype=np.float32))
            for form, sa, sb in step_matmuls(batch, src, tgt)]


def _time_parts(fn) -> float:
    """Seconds per call of one part of a step: `_time_steps` with 3 calls per window, 1 warm-up."""
    return time_steps(fn, steps=3, warmup=1)


def breakdown_ours(model, params, batch, args) -> dict:
    """Seconds for the forward loss, forward + backward, and the step's matmuls alone (XLA)."""
    import jax
    import jax.numpy as jnp

    rng = jax.random.PRNGKey(0)

    def loss(p, b):
        return model.loss_fn(p, b, rng, z_loss=1e-4)[0]

    fwd, grad = jax.jit(loss), jax.jit(jax.grad(loss))
    mats = [(form, jnp.asarray(a), jnp.asarray(b))
            for form, a, b in _matmul_inputs(args.batch, args.src_len, args.tgt_len)]
    forms = [m[0] for m in mats]
    all_matmuls = jax.jit(lambda arrays: [_matmul(f, a, b) for f, (a, b) in zip(forms, arrays, strict=True)])
    arrays = [(a, b) for _, a, b in mats]
    return {"forward_s": _time_parts(lambda: jax.block_until_ready(fwd(params, batch))),
            "forward_backward_s": _time_parts(
                lambda: jax.block_until_ready(grad(params, batch))),
            "matmuls_only_s": _time_parts(
                lambda: jax.block_until_ready(all_matmuls(arrays)))}


def breakdown_hf(model, forward, args) -> dict:
    """Seconds for the forward loss, forward + backward, and the step's matmuls alone (torch)."""
    import torch

    mats = [(form, torch.from_numpy(a), torch.from_numpy(b))
            for form, a, b in _matmul_inputs(args.batch, args.src_len, args.tgt_len)]

    def all_matmuls():
        with torch.no_grad():
            for form, a, b in mats:
                _matmul(form, a, b)

    def forward_backward():
        model.zero_grad(set_to_none=True)
        forward().backward()

    return {"forward_s": _time_parts(lambda: forward().detach()),
            "forward_backward_s": _time_parts(forward_backward),
            "matmuls_only_s": _time_parts(all_matmuls)}


def side_ours(args) -> dict:
    import jax
    import numpy as np

    from mnmt.models.configs import T5Config
    from mnmt.models.encoder_decoder import EncoderDecoderModel
    from mnmt.models.zoo import get_config
    from mnmt.training.step_functions import put_global_batch, single_device_step_functions

    if args.size:
        config = get_config(args.size, REF["vocab"])
    else:
        config = T5Config(vocab_size=REF["vocab"], emb_dim=REF["d_model"], num_heads=REF["heads"],
                          head_dim=REF["head_dim"], mlp_dim=REF["d_ff"],
                          num_encoder_layers=REF["layers"], num_decoder_layers=REF["layers"],
                          dropout_rate=0.0, dtype="float32", logits_via_embedding=False)
    model = EncoderDecoderModel(config)
    batch = random_batch(args.batch, args.src_len, args.tgt_len, REF["vocab"])
    fns = single_device_step_functions(model, batch, z_loss=1e-4)
    state = {"s": fns.init(jax.random.PRNGKey(0))}
    device_batch = put_global_batch(batch, fns.batch_sharding)

    def run_step():
        state["s"], m = fns.step(state["s"], device_batch)
        jax.block_until_ready(m["loss"])

    sec = time_steps(run_step, args.steps, args.warmup)
    from mnmt.models import accounting

    flops = accounting.train_flops_per_example(config, args.src_len, args.tgt_len) * args.batch
    counts = accounting.param_counts(config)
    state["s"], last = fns.step(state["s"], device_batch)  # the step donates its input state
    out = {"sec_per_step": sec, "peak_rss_mb": _peak_rss_mb(), "flops_per_step": flops,
           "params_total": int(counts.total), "params_non_embedding": int(counts.non_embedding),
           "loss": float(jax.device_get(last["loss"]))}
    if args.peak:
        out["matmul_peak_flops"] = measure_peak()
    if args.breakdown:  # after the peak RSS is read: its matmul inputs are not the step's memory
        out["breakdown"] = breakdown_ours(model, state["s"]["params"], device_batch, args)
    _ = np
    return out


def side_hf(args) -> dict:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
    from transformers.optimization import Adafactor

    torch.manual_seed(0)
    torch.set_num_threads(usable_cpus())  # as XLA: the CPUs this process may run on
    cfg = T5Config(vocab_size=REF["vocab"], d_model=REF["d_model"], d_kv=REF["head_dim"],
                   d_ff=REF["d_ff"], num_layers=REF["layers"], num_decoder_layers=REF["layers"],
                   num_heads=REF["heads"], feed_forward_proj="gated-gelu", dropout_rate=0.0,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    # transformers 5.x ignores tie_word_embeddings=False in the constructor: set it afterwards.
    cfg.tie_word_embeddings = False
    model = T5ForConditionalGeneration(cfg)
    # T5.1.1 as in mnmt: one input embedding shared by encoder and decoder, untied logits
    # (with tie_word_embeddings=False, transformers 5.x gives each stack its own input table).
    model.encoder.embed_tokens = model.shared
    model.decoder.embed_tokens = model.shared
    model.train()
    assert model.lm_head.weight.data_ptr() != model.shared.weight.data_ptr(), "logits are tied"
    opt = Adafactor(model.parameters(), lr=1e-3, relative_step=False, scale_parameter=True,
                    warmup_init=False)
    b = random_batch(args.batch, args.src_len, args.tgt_len, REF["vocab"])
    enc = torch.from_numpy(b["encoder_input_tokens"].astype("int64"))
    dec = torch.from_numpy(b["decoder_input_tokens"].astype("int64"))
    labels = torch.from_numpy(b["decoder_target_tokens"].astype("int64"))
    last = {}

    def forward():
        return model(input_ids=enc, decoder_input_ids=dec, labels=labels).loss

    def run_step():
        opt.zero_grad(set_to_none=True)
        loss = forward()
        loss.backward()
        opt.step()
        last["loss"] = float(loss)

    sec = time_steps(run_step, args.steps, args.warmup)
    n = sum(p.numel() for p in model.parameters())
    import transformers

    out = {"sec_per_step": sec, "peak_rss_mb": _peak_rss_mb(), "params_total": int(n),
           "loss": last["loss"], "torch": torch.__version__,
           "transformers": transformers.__version__}
    if args.breakdown:
        out["breakdown"] = breakdown_hf(model, forward, args)
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def measure_peak(n: int = 2048, repeats: int = 8, dtype: str = "float32") -> float:
    """Best FLOP/s of an n×n matmul in `dtype` via XLA on the default device (CPU: all cores)."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), getattr(jnp, dtype))
    f = jax.jit(lambda x, y: x @ y)
    f(a, a).block_until_ready()
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(a, a).block_until_ready()
        best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    return best


def _child(side: str, args, extra: list[str] | None = None) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--batch", str(args.batch),
           "--src_len", str(args.src_len), "--tgt_len", str(args.tgt_len)] + (extra or [])
    load_before = os.getloadavg()[0]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{side} benchmark failed:\n{res.stderr[-3000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["load_before"] = load_before
    out["load_after"] = os.getloadavg()[0]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--zoo", action="store_true", help="also mini-1 … mini-8 tokens/s and MFU")
    p.add_argument("--breakdown", action="store_true",
                   help="also time each side's forward, forward+backward and its step's matmuls "
                        "alone, and report the ratio our step would reach if it were matmuls only")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=REF["batch"])
    p.add_argument("--src_len", type=int, default=REF["src_len"])
    p.add_argument("--tgt_len", type=int, default=REF["tgt_len"])
    p.add_argument("--side", choices=["ours", "hf"], help=argparse.SUPPRESS)
    p.add_argument("--size", default=None, help=argparse.SUPPRESS)
    p.add_argument("--peak", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side:
        fn = side_ours if args.side == "ours" else side_hf
        print(json.dumps(fn(args)))
        return 0

    tokens = args.batch * (args.src_len + args.tgt_len)
    ours, hf = [], []
    more = ["--breakdown"] if args.breakdown else []
    for _ in range(args.rounds):
        ours.append(_child("ours", args, ["--peak"] + more))
        hf.append(_child("hf", args, more))
    best_ours = min(ours, key=lambda o: o["sec_per_step"])
    best_hf = min(hf, key=lambda o: o["sec_per_step"])
    zoo_runs = {}
    if args.zoo:
        for i in range(1, 9):
            zoo_runs[f"mini-{i}"] = _child("ours", args, ["--size", f"mini-{i}", "--peak"])
    # MFU against the best matmul peak seen in any child: the machine's capability, not the
    # share of it that other processes left us at one moment.
    peak = max(o["matmul_peak_flops"] for o in ours + list(zoo_runs.values()))
    result = {
        "machine": f"{platform.machine()} {usable_cpus()} usable cpus of {os.cpu_count()}, "
                   f"{cpu_model()}, {platform.platform()}",
        "config": dict(REF, batch=args.batch, src_len=args.src_len, tgt_len=args.tgt_len),
        "tokens_per_step": tokens,
        "ours_tokens_per_s": tokens / best_ours["sec_per_step"],
        "hf_tokens_per_s": tokens / best_hf["sec_per_step"],
        "ratio": best_hf["sec_per_step"] / best_ours["sec_per_step"],
        "ours_sec_per_step": best_ours["sec_per_step"],
        "hf_sec_per_step": best_hf["sec_per_step"],
        "ours_peak_rss_mb": max(o["peak_rss_mb"] for o in ours),
        "hf_peak_rss_mb": max(o["peak_rss_mb"] for o in hf),
        "ours_params": best_ours["params_total"], "hf_params": best_hf["params_total"],
        "ours_mfu": best_ours["flops_per_step"] / best_ours["sec_per_step"] / peak,
        "matmul_peak_gflops": peak / 1e9,
        "load_average": [round(x, 2) for o in ours + hf for x in (o["load_before"],
                                                                 o["load_after"])],
        "load_average_max": round(max(max(o["load_before"], o["load_after"])
                                      for o in ours + hf), 2),
        "matmul_peak_gflops_per_child": [round(o["matmul_peak_flops"] / 1e9, 1)
                                         for o in ours + list(zoo_runs.values())],
        "versions": {"torch": best_hf["torch"], "transformers": best_hf["transformers"]},
        "rounds": args.rounds,
    }
    if args.breakdown:
        parts = {side: {key: min(o["breakdown"][key] for o in runs)
                        for key in runs[0]["breakdown"]}
                 for side, runs in (("ours", ours), ("hf", hf))}
        for side, best in (("ours", best_ours), ("hf", best_hf)):
            parts[side]["step_s"] = best["sec_per_step"]
            parts[side]["non_matmul_s"] = best["sec_per_step"] - parts[side]["matmuls_only_s"]
        parts["ratio_if_ours_were_matmuls_only"] = (best_hf["sec_per_step"]
                                                    / parts["ours"]["matmuls_only_s"])
        parts["matmul_gflop_per_step"] = sum(
            _matmul_flops(*m) for m in step_matmuls(args.batch, args.src_len, args.tgt_len)) / 1e9
        result["breakdown"] = parts
    if args.zoo:
        zoo = {}
        for name, o in zoo_runs.items():
            zoo[name] = {
                "tokens_per_s": tokens / o["sec_per_step"],
                "mfu": o["flops_per_step"] / o["sec_per_step"] / peak,
                "non_embedding_params": o["params_non_embedding"],
                "load": round(o["load_after"], 2),
                "sec_per_step": o["sec_per_step"], "peak_rss_mb": o["peak_rss_mb"]}
        result["zoo"] = zoo
    if args.json:
        print(json.dumps(result))
    else:
        print(f"machine: {result['machine']}; load average during run: "
              f"{result['load_average']}")
        print(f"mnmt : {result['ours_tokens_per_s']:8.0f} tokens/s "
              f"({result['ours_sec_per_step']:.3f} s/step), peak RSS "
              f"{result['ours_peak_rss_mb']:.0f} MB, MFU {100 * result['ours_mfu']:.1f}%")
        print(f"HF T5: {result['hf_tokens_per_s']:8.0f} tokens/s "
              f"({result['hf_sec_per_step']:.3f} s/step), peak RSS "
              f"{result['hf_peak_rss_mb']:.0f} MB")
        print(f"ratio (ours / HF tokens/s): {result['ratio']:.2f}  "
              f"(matmul peak {result['matmul_peak_gflops']:.1f} GFLOP/s)")
        if "breakdown" in result:
            bd = result["breakdown"]
            print(f"{'seconds':>22s} {'forward':>8s} {'fwd+bwd':>8s} {'step':>8s} "
                  f"{'matmuls':>8s} {'the rest':>8s}")
            for side in ("ours", "hf"):
                d = bd[side]
                print(f"{side:>22s} {d['forward_s']:8.3f} {d['forward_backward_s']:8.3f} "
                      f"{d['step_s']:8.3f} {d['matmuls_only_s']:8.3f} {d['non_matmul_s']:8.3f}")
            print(f"ratio if our step were its matmuls only: "
                  f"{bd['ratio_if_ours_were_matmuls_only']:.2f} "
                  f"({bd['matmul_gflop_per_step']:.1f} GFLOP of matmuls per step)")
        for name, z in result.get("zoo", {}).items():
            print(f"  {name}: {z['non_embedding_params']:>9,} non-emb params "
                  f"{z['tokens_per_s']:8.0f} tokens/s MFU {100 * z['mfu']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
