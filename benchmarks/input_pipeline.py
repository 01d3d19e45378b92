"""Throughput of the training input pipeline (packed examples/s and tokens/s).

Measures :class:`mnmt.data.pipeline.TrainInputs` on a two-pair synthetic mixture at the mini
zoo's feature lengths, and — in the same run, as the named competitor — seqio's own pipeline
for the same mixture (``seqio.get_dataset`` with ``EncDecFeatureConverter(pack=True)``).
The requirement (issue 4): at least 10× what the CPU trainer consumes
(``--trainer_steps_per_s`` × batch rows), so training is never input-bound. On a shared machine
wall-clock rates depend on the load; ``*_per_cpu_s`` divide by this process's CPU time instead
(the rate one free core gives).

    python benchmarks/input_pipeline.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time


def _machine() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count()}
    try:
        info["load_avg"] = list(os.getloadavg())
    except OSError:  # pragma: no cover
        pass
    return info


def _measure(it, n_batches: int, warmup: int = 3) -> dict:
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    c0 = time.process_time()
    examples = tokens = rows = 0
    for _ in range(n_batches):
        b = next(it)
        w = b["decoder_loss_weights"]
        rows += w.shape[0]
        tokens += int(w.sum()) + int((b["encoder_input_tokens"] != 0).sum())
        if "decoder_segment_ids" in b:
            examples += int(b["decoder_segment_ids"].max(axis=1).sum())
        else:
            examples += int((w.sum(axis=1) > 0).sum())
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"seconds": dt, "cpu_seconds": cpu, "batches": n_batches, "rows": rows,
            "examples": examples, "tokens": tokens, "batches_per_s": n_batches / dt,
            "rows_per_s": rows / dt, "examples_per_s": examples / dt, "tokens_per_s": tokens / dt,
            # per CPU-second of this process (all its threads): what one free core would give
            "examples_per_cpu_s": examples / cpu, "rows_per_cpu_s": rows / cpu,
            "tokens_per_cpu_s": tokens / cpu}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu-tiny")
    ap.add_argument("--vocab_size", type=int, default=1000)
    ap.add_argument("--vocab", default=None, help="existing .model (default: train one)")
    ap.add_argument("--inputs_length", type=int, default=32)
    ap.add_argument("--targets_length", type=int, default=32)
    ap.add_argument("--batch_size", type=int, default=64)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--weight", type=float, default=0.5, help="weight of the first pair")
    ap.add_argument("--trainer_steps_per_s", type=float, default=30.0,
                    help="what the CPU trainer consumes (upper end of 10-30 steps/s)")
    ap.add_argument("--stream_processes", action="store_true",
                    help="generate each synthetic stream in its own process")
    ap.add_argument("--no_seqio", action="store_true", help="skip the seqio competitor")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)

    from mnmt.data.mixtures import register_weighted_mixture
    from mnmt.data.pipeline import TrainInputs
    from mnmt.data.synthetic import get_family
    from mnmt.data.tasks import register_synthetic_tasks
    from mnmt.data.vocab import train_vocabulary

    fam = get_family(args.preset)
    vocab = args.vocab
    if vocab is None:
        vocab = train_vocabulary(fam, tempfile.mkdtemp(prefix="mnmt-bench-"), args.vocab_size,
                                 n_per_pair=5000)
    tasks = register_synthetic_tasks(args.preset, vocab)
    first, second = list(tasks.values())[:2]
    mix = register_weighted_mixture("bench_input_pipeline",
                                     {first: args.weight, second: 1 - args.weight})
    lengths = {"inputs": args.inputs_length, "targets": args.targets_length}
    it = TrainInputs(mix, lengths, args.batch_size, seed=0,
                     stream_processes=args.stream_processes)
    ours = _measure(it, args.batches)
    it.shutdown()
    result = {
        "benchmark": "input_pipeline",
        "preset": args.preset,
        "mixture": {first: args.weight, second: 1 - args.weight},
        "feature_lengths": lengths,
        "stream_processes": args.stream_processes,
        # with stream processes, *_per_cpu_s count only this process (mixing + packing)
        "cpu_rates_exclude_stream_processes": args.stream_processes,
        "batch_size": args.batch_size,
        "examples_per_s": ours["examples_per_s"],
        "tokens_per_s": ours["tokens_per_s"],
        "rows_per_s": ours["rows_per_s"],
        "batches_per_s": ours["batches_per_s"],
        "examples_per_cpu_s": ours["examples_per_cpu_s"],
        "tokens_per_cpu_s": ours["tokens_per_cpu_s"],
        "rows_per_cpu_s": ours["rows_per_cpu_s"],
        "examples_per_row": ours["examples"] / ours["rows"],
        "trainer_rows_per_s": args.trainer_steps_per_s * args.batch_size,
        "headroom_vs_trainer": ours["rows_per_s"] / (args.trainer_steps_per_s * args.batch_size),
        "headroom_vs_trainer_per_cpu_s": ours["rows_per_cpu_s"]
        / (args.trainer_steps_per_s * args.batch_size),
        "machine": _machine(),
    }
    if not args.no_seqio:
        import seqio

        ds = seqio.get_dataset(mix, lengths, seqio.EncDecFeatureConverter(pack=True),
                               dataset_split="train", shuffle=True, seed=0, num_epochs=None,
                               use_cached=False, batch_size=args.batch_size, verbose=False)
        ds = ds.prefetch(2)
        theirs = _measure(ds.as_numpy_iterator(), max(20, args.batches // 3))
        result["seqio"] = {k: theirs[k] for k in ("examples_per_s", "tokens_per_s", "rows_per_s",
                                                  "examples_per_cpu_s")}
        result["speedup_vs_seqio"] = ours["examples_per_s"] / theirs["examples_per_s"]
        # seqio runs tf.data on many threads: compare CPU cost per example too
        result["cpu_efficiency_vs_seqio"] = (ours["examples_per_cpu_s"]
                                             / theirs["examples_per_cpu_s"])
    result["machine"]["load_avg_end"] = list(os.getloadavg())
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
