"""Training-step speed on one accelerator: mnmt (JAX/Flax) against Hugging Face's PyTorch T5.

For each model size (default: the Fernandes et al. 2023 App. A sizes, fernandes-1 … fernandes-8,
vocabulary 128,000, on a GPU or TPU; a tiny size on CPU) both sides train the same T5.1.1 network
(gated-GELU MLP, untied logits, one shared input embedding, the size's dropout) with Adafactor,
float32 parameters and bfloat16 activations (mnmt: `T5Config.dtype`; PyTorch: `torch.autocast`),
on the same random batch of `--src-len` + `--tgt-len` tokens per row. The batch starts at the
study's (Fernandes: 500K target tokens → 1,953 rows of 256) and is halved until a step runs
without running out of device memory; the PyTorch side starts at the batch mnmt ran. Each side of
each size runs in its own subprocess, so its memory is its own and one side's out-of-memory
error cannot disturb the other.

Reported per size and side: seconds per step (best of 3 windows of `--steps` steps after
`--warmup` steps), tokens/s (source + target tokens), MFU = model FLOPs per step
(`mnmt.models.accounting.train_flops_per_example` × rows, the same count for both sides) over
the device's peak, and the peak device memory (`memory_stats()["peak_bytes_in_use"]` for JAX,
`torch.cuda.max_memory_allocated()` for PyTorch; peak RSS on CPU). The peak is the device's
nominal dense bf16 FLOP/s where the device kind is known (`NOMINAL_PEAK_FLOPS`), otherwise the
best measured matmul rate in the benchmark's dtype; both are reported.

    python benchmarks/speed/accelerator_step.py --json                  # every Fernandes size
    python benchmarks/speed/accelerator_step.py --sizes fernandes-1,fernandes-3 --steps 10
    python benchmarks/speed/accelerator_step.py --json --steps 2        # on CPU: a tiny size

The PyTorch side needs `torch` and `transformers` (`pip install -e ".[bench]"`); without them its
entries say so and only mnmt is measured. CUDA JAX comes with the `[gpu]` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.speed.train_step import measure_peak, random_batch, time_steps  # noqa: E402

# Dense bf16 peak FLOP/s per device, by a substring of the device kind (first match wins).
NOMINAL_PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("GH200", 989e12),
    ("A100", 312e12), ("L40S", 362e12), ("L4", 121e12), ("A10G", 70e12),
    ("TPU v5p", 459e12), ("TPU v5 lite", 197e12), ("TPU v5e", 197e12), ("TPU v4", 275e12),
    ("TPU v6", 918e12),
)
FERNANDES_STUDY_TOKENS = 500_000  # Fernandes et al. 2023 §3.1: batches of 500K tokens
CPU_DEFAULTS = {"sizes": "mini-1", "vocab": 512, "src_len": 32, "tgt_len": 32, "rows": 16,
                "dtype": "float32"}
ACCELERATOR_DEFAULTS = {"sizes": ",".join(f"fernandes-{i}" for i in range(1, 9)),
                        "vocab": 0, "src_len": 256, "tgt_len": 256,
                        "rows": FERNANDES_STUDY_TOKENS // 256, "dtype": "bfloat16"}
RESULT_KEYS = ("machine", "device", "platform", "dtype", "peak_flops", "peak_source",
               "measured_peak_flops", "sizes", "versions")
SIDE_KEYS = ("rows", "tokens_per_step", "sec_per_step", "tokens_per_s", "mfu",
             "peak_memory_bytes", "loss", "halvings")


# ------------------------------------------------------------------ shared helpers
def nominal_peak(device_kind: str) -> float | None:
    """The dense bf16 peak of a known device kind (`NOMINAL_PEAK_FLOPS`), else None."""
    for fragment, flops in NOMINAL_PEAK_FLOPS:
        if fragment.lower() in device_kind.lower():
            return flops
    return None


def model_config(size: str, vocab: int, dtype: str):
    """The zoo's config of `size` (its own vocabulary when `vocab` is 0) in `dtype`."""
    from mnmt.models.zoo import get_config

    return get_config(size, vocab or None, dtype=dtype)


def step_flops(size: str, vocab: int, rows: int, src: int, tgt: int) -> float:
    """Model FLOPs of one training step (forward + backward, exact count) at `rows` rows."""
    from mnmt.models import accounting

    config = model_config(size, vocab, "float32")
    return accounting.train_flops_per_example(config, src, tgt) * rows


def is_out_of_memory(err: BaseException) -> bool:
    text = f"{type(err).__name__} {err}"
    return any(k in text for k in ("RESOURCE_EXHAUSTED", "OutOfMemoryError", "out of memory",
                                   "Out of memory", "OOM"))


def halving_search(try_rows, rows: int, min_rows: int) -> tuple[int, dict, int]:
    """Run `try_rows(r)` from `rows`, halving on out-of-memory errors down to `min_rows`:
    (rows that ran, its result, halvings). Other errors propagate."""
    halvings = 0
    while True:
        try:
            return rows, try_rows(rows), halvings
        except Exception as err:  # noqa: BLE001 - only memory errors are retried
            if not is_out_of_memory(err) or rows // 2 < min_rows:
                raise
            rows, halvings = rows // 2, halvings + 1


# ------------------------------------------------------------------ the two sides (children)
def side_ours(args) -> dict:
    """mnmt's own training step (Adafactor, rsqrt schedule) on the default JAX device."""
    import jax

    from mnmt.models.encoder_decoder import EncoderDecoderModel
    from mnmt.training.step_functions import put_global_batch, single_device_step_functions

    config = model_config(args.size, args.vocab, args.dtype)
    model = EncoderDecoderModel(config)

    def try_rows(rows: int) -> dict:
        batch = random_batch(rows, args.src_len, args.tgt_len, config.vocab_size)
        fns = single_device_step_functions(model, batch, z_loss=1e-4)
        state = {"s": fns.init(jax.random.PRNGKey(0))}
        device_batch = put_global_batch(batch, fns.batch_sharding)
        last = {}

        def run_step():
            state["s"], metrics = fns.step(state["s"], device_batch)
            last["loss"] = float(jax.device_get(metrics["loss"]))

        sec = time_steps(run_step, args.steps, args.warmup)
        return {"sec_per_step": sec, "loss": last["loss"]}

    rows, out, halvings = halving_search(try_rows, args.rows, args.min_rows)
    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    peak = stats.get("peak_bytes_in_use") or peak_rss_bytes()
    return dict(out, rows=rows, halvings=halvings, peak_memory_bytes=int(peak),
                device_kind=device.device_kind, platform=device.platform,
                measured_peak_flops=measured_peak_jax(args.dtype),
                versions={"jax": jax.__version__})


def side_hf(args) -> dict:
    """Hugging Face's PyTorch T5 with the same shapes, Adafactor and autocast to `dtype`."""
    import torch
    import transformers
    from transformers import T5Config, T5ForConditionalGeneration
    from transformers.optimization import Adafactor

    mine = model_config(args.size, args.vocab, args.dtype)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    gated = tuple(mine.mlp_activations) == ("gelu", "linear")
    cfg = T5Config(vocab_size=mine.vocab_size, d_model=mine.emb_dim, d_kv=mine.head_dim,
                   d_ff=mine.mlp_dim, num_layers=mine.num_encoder_layers,
                   num_decoder_layers=mine.num_decoder_layers, num_heads=mine.num_heads,
                   feed_forward_proj="gated-gelu" if gated else "relu",
                   dropout_rate=mine.dropout_rate, decoder_start_token_id=0, pad_token_id=0,
                   eos_token_id=1)
    cfg.tie_word_embeddings = False  # transformers 5.x ignores it in the constructor
    model = T5ForConditionalGeneration(cfg)
    model.encoder.embed_tokens = model.shared  # T5.1.1 as mnmt: one shared input table
    model.decoder.embed_tokens = model.shared
    model.to(device).train()
    optimizer = Adafactor(model.parameters(), lr=1e-3, relative_step=False,
                          scale_parameter=True, warmup_init=False)
    autocast_dtype = torch.bfloat16 if args.dtype == "bfloat16" else None

    def try_rows(rows: int) -> dict:
        b = random_batch(rows, args.src_len, args.tgt_len, mine.vocab_size)
        enc, dec, labels = (torch.from_numpy(b[k].astype("int64")).to(device) for k in
                            ("encoder_input_tokens", "decoder_input_tokens",
                             "decoder_target_tokens"))
        last = {}

        def run_step():
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = model(input_ids=enc, decoder_input_ids=dec, labels=labels).loss
            loss.backward()
            optimizer.step()
            last["loss"] = float(loss)  # synchronises the device

        try:
            return {"sec_per_step": time_steps(run_step, args.steps, args.warmup),
                    "loss": last["loss"]}
        except Exception:
            optimizer.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.empty_cache()
            raise

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rows, out, halvings = halving_search(try_rows, args.rows, args.min_rows)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else peak_rss_bytes()
    return dict(out, rows=rows, halvings=halvings, peak_memory_bytes=int(peak),
                versions={"torch": torch.__version__, "transformers": transformers.__version__})


def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measured_peak_jax(dtype: str) -> float:
    """Best matmul FLOP/s in `dtype` on the default JAX device: 4096² (1024² on CPU)."""
    import jax

    n = 1024 if jax.devices()[0].platform == "cpu" else 4096
    return measure_peak(n, repeats=5, dtype=dtype)


# ------------------------------------------------------------------ parent
def run_side(side: str, size: str, rows: int, args) -> dict:
    """One side of one size in its own subprocess; {"error": …} if it failed."""
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--size", size,
           "--rows", str(rows), "--min-rows", str(args.min_rows), "--vocab", str(args.vocab),
           "--src-len", str(args.src_len), "--tgt-len", str(args.tgt_len),
           "--dtype", args.dtype, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          timeout=args.timeout_s)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or "").strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit status {done.returncode}"}
    return json.loads(lines[-1])


def hf_available() -> str | None:
    """None if torch and transformers import, else why not."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        return f"not measured: {err.name} is not installed (pip install -e \".[bench]\")"
    return None


def summarise(side: dict, size: str, args, peak: float) -> dict:
    """Tokens/s and MFU of one side's measurement (its rows may be fewer than asked)."""
    if "error" in side or "skipped" in side:
        return side
    tokens = side["rows"] * (args.src_len + args.tgt_len)
    flops = step_flops(size, args.vocab, side["rows"], args.src_len, args.tgt_len)
    return {"rows": side["rows"], "tokens_per_step": tokens,
            "sec_per_step": side["sec_per_step"],
            "tokens_per_s": tokens / side["sec_per_step"],
            "mfu": flops / side["sec_per_step"] / peak,
            "peak_memory_bytes": side["peak_memory_bytes"], "loss": side["loss"],
            "halvings": side["halvings"]}


def measure(args) -> dict:
    """Every size, mnmt then PyTorch, and the device-level fields of the result."""
    results, device, versions, measured = {}, {}, {}, 0.0
    no_hf = hf_available()
    for size in [s for s in args.sizes.split(",") if s]:
        print(f"[accelerator_step] {size}: mnmt …", file=sys.stderr, flush=True)
        ours = run_side("ours", size, args.rows, args)
        if "error" not in ours:
            device = {"kind": ours["device_kind"], "platform": ours["platform"]}
            versions.update(ours["versions"])
            measured = max(measured, ours["measured_peak_flops"])
        if no_hf or "error" in ours:
            hf = {"skipped": no_hf or "not measured: the mnmt side failed"}
        else:
            print(f"[accelerator_step] {size}: PyTorch T5 …", file=sys.stderr, flush=True)
            hf = run_side("hf", size, ours["rows"], args)
            versions.update(hf.get("versions", {}))
        results[size] = {"ours": ours, "hf": hf}
    nominal = nominal_peak(device.get("kind", ""))
    peak = nominal or measured or float("nan")
    sizes = {}
    for size, sides in results.items():
        ours, hf = (summarise(sides[k], size, args, peak) for k in ("ours", "hf"))
        entry = {"ours": ours, "hf": hf}
        if "tokens_per_s" in ours and "tokens_per_s" in hf:
            entry["speedup"] = ours["tokens_per_s"] / hf["tokens_per_s"]
        sizes[size] = entry
    return {"machine": machine_text(), "device": device.get("kind", "unknown"),
            "platform": device.get("platform", "unknown"), "dtype": args.dtype,
            "peak_flops": peak, "peak_source": "nominal" if nominal else "measured matmul",
            "measured_peak_flops": measured, "sizes": sizes, "versions": versions,
            "config": {"src_len": args.src_len, "tgt_len": args.tgt_len,
                       "rows_asked": args.rows, "steps": args.steps, "warmup": args.warmup}}


def machine_text() -> str:
    return f"{platform.machine()} {os.cpu_count()} cpus, {platform.platform()}"


def default_platform() -> str:
    """The default JAX backend's platform, asked in a child (this process stays jax-free)."""
    done = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"],
                          capture_output=True, text=True, check=False)
    return (done.stdout.strip().splitlines() or ["cpu"])[-1]


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--sizes", default=None, help="comma-separated zoo sizes (default: the "
                   "Fernandes sizes on an accelerator, mini-1 on CPU)")
    p.add_argument("--rows", type=int, default=None, help="rows to start from (default: the "
                   "study's batch on an accelerator, 16 on CPU); halved on out-of-memory")
    p.add_argument("--min-rows", type=int, default=1)
    p.add_argument("--vocab", type=int, default=None,
                   help="vocabulary (0 = the size's own; default 512 on CPU)")
    p.add_argument("--src-len", type=int, default=None)
    p.add_argument("--tgt-len", type=int, default=None)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default=None,
                   help="activation dtype (default bfloat16 on an accelerator, float32 on CPU)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout-s", type=float, default=900.0, help="per side and size")
    p.add_argument("--side", choices=["ours", "hf"], help=argparse.SUPPRESS)
    p.add_argument("--size", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def fill_defaults(args: argparse.Namespace, platform_name: str) -> argparse.Namespace:
    defaults = CPU_DEFAULTS if platform_name == "cpu" else ACCELERATOR_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def print_table(result: dict) -> None:
    print(f"device: {result['device']} ({result['platform']}), {result['dtype']}, peak "
          f"{result['peak_flops'] / 1e12:.1f} TFLOP/s ({result['peak_source']})")
    print(f"{'size':<13}{'side':<6}{'rows':>6}{'s/step':>10}{'tokens/s':>12}{'MFU':>8}"
          f"{'peak GiB':>10}")
    for size, entry in result["sizes"].items():
        for side in ("ours", "hf"):
            m = entry[side]
            if "tokens_per_s" not in m:
                print(f"{size:<13}{side:<6}  {m.get('error') or m.get('skipped')}")
                continue
            print(f"{size:<13}{side:<6}{m['rows']:>6}{m['sec_per_step']:>10.4f}"
                  f"{m['tokens_per_s']:>12.0f}{m['mfu']:>8.1%}"
                  f"{m['peak_memory_bytes'] / 2**30:>10.2f}")
        if "speedup" in entry:
            print(f"{size:<13}mnmt tokens/s ÷ PyTorch tokens/s = {entry['speedup']:.2f}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.side:  # a child: the platform decides nothing here, every value was passed
        side = side_ours if args.side == "ours" else side_hf
        print(json.dumps(side(args)))
        return 0
    fill_defaults(args, default_platform())
    result = measure(args)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0 if all("tokens_per_s" in e["ours"] for e in result["sizes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
