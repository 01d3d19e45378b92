"""Study throughput: grouped (vmapped) training of a size's runs against one run at a time.

The same K runs of one model size (the K mixture weights of a two-pair study on the synthetic
family), trained in the same process layout two ways, as `mnmt-study run` would:

- one at a time: `mnmt.training.trainer.train` per run (the competitor: the study before
  grouping);
- grouped: `mnmt.training.trainer.train_group` on all K (one compiled program, a leading run
  axis; each run keeps its own directory, metrics and checkpoints);
- with `--workers W` > 1, also the layout `mnmt-study run` uses on a CPU host: the K runs in W
  groups, each trained by `train_group` in a worker process pinned to its own core with XLA's
  CPU pool limited to it (`mnmt.study.workers`). `ratio_workers_wall` = this arm / one at a time
  (the study's layout against the study before grouping and workers); `ratio_wall` keeps the
  same-layout comparison of grouping alone.

Both arms use a fresh persistent XLA compilation cache each (as a study does), evaluate at the
end only and do not decode. Reported per arm: wall seconds (everything included: setup,
compilation, steps, evaluation, checkpoints), target tokens trained, target tokens/s over the
wall time, and the trainer's steady-state tokens/s (compilation excluded); `ratio_wall` and
`ratio_steady` = grouped / one at a time. Run the arms in alternating order with `--rounds`.

    python benchmarks/speed/study_throughput.py --json
    python benchmarks/speed/study_throughput.py --size mini-1 --runs 5 --steps 300 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402


def _setup(tmp: str, runs: int, vocab_size: int) -> tuple[str, dict, list[str]]:
    from mnmt.data import mixtures, synthetic, tasks, vocab

    family = synthetic.get_family("cpu-tiny")
    path = vocab.train_vocabulary(family, os.path.join(tmp, "vocab"), vocab_size)
    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", path)
    weights = [i / (runs - 1) for i in range(runs)] if runs > 1 else [0.5]
    names = []
    for p in weights:
        trained = {t: w for t, w in zip(pair_tasks.values(), (p, 1 - p), strict=True) if w > 0}
        names.append(mixtures.register_weighted_mixture(f"throughput_p{p:.3f}", trained))
    return path, pair_tasks, names


def _configs(out: str, args, vocab_path: str, pair_tasks: dict, mixture_names: list[str]):
    from mnmt.training.config import (
        CheckpointConfig,
        DecodeConfig,
        EvalConfig,
        InputConfig,
        TrainConfig,
    )

    return [TrainConfig(
        model_dir=os.path.join(out, f"run{i}"), model_size=args.size, vocabulary_path=vocab_path,
        train_steps=args.steps,
        inputs=InputConfig(mixture_or_task_name=name,
                           feature_lengths={"inputs": args.length, "targets": args.length},
                           batch_size=args.batch_size),
        eval=EvalConfig(tasks=dict(pair_tasks), period=args.steps),
        decode=DecodeConfig(at_end=False), checkpoint=CheckpointConfig(period=args.steps),
        seed=i, tensorboard=False, log_every=50) for i, name in enumerate(mixture_names)]


def _arm(grouped: bool, args, vocab_path: str, pair_tasks: dict, names: list[str]) -> dict:
    import jax

    from mnmt.training.trainer import train, train_group

    with tempfile.TemporaryDirectory() as out:
        jax.config.update("jax_compilation_cache_dir", os.path.join(out, "xla_cache"))
        configs = _configs(out, args, vocab_path, pair_tasks, names)
        steady = []

        def progress(event):
            if event.kind == "train" and event.tokens_per_s:
                steady.append(float(event.tokens_per_s))

        t0 = time.perf_counter()
        if grouped:
            summaries = train_group(configs, progress=progress)
        else:
            summaries = [train(c, progress=progress) for c in configs]
        wall = time.perf_counter() - t0
    assert all(s.status == "finished" for s in summaries), [s.status for s in summaries]
    tokens = sum(s.tokens for s in summaries)
    # one at a time: the steady rate of one run is the study's rate while it trains
    return {"wall_s": wall, "target_tokens": tokens, "tokens_per_s_wall": tokens / wall,
            "tokens_per_s_steady": (sorted(steady)[len(steady) // 2] if steady else None)}


def _worker(index: int, core: int, args, vocab_path: str, weights: list[float], members: list[int],
            results) -> None:
    """One worker of the workers arm: registers the tasks again, trains its runs as one group."""
    os.sched_setaffinity(0, {core})
    from mnmt.data import mixtures, tasks
    from mnmt.tensorflow_setup import start_tensorflow
    from mnmt.training.trainer import train_group

    start_tensorflow()
    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", vocab_path)
    names = []
    for p in weights:
        trained = {t: w for t, w in zip(pair_tasks.values(), (p, 1 - p), strict=True) if w > 0}
        names.append(mixtures.register_weighted_mixture(f"throughput_p{p:.3f}", trained))
    with tempfile.TemporaryDirectory() as out:
        configs = _configs(out, args, vocab_path, pair_tasks, names)
        summaries = train_group([configs[i] for i in members], progress=lambda event: None)
    results.put((index, sum(s.tokens for s in summaries),
                 all(s.status == "finished" for s in summaries)))


def _workers_arm(args, vocab_path: str) -> dict:
    import multiprocessing as mp

    from mnmt.study.workers import available_cores, worker_environment

    weights = [i / (args.runs - 1) for i in range(args.runs)] if args.runs > 1 else [0.5]
    cores = available_cores()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    saved = dict(os.environ)
    t0 = time.perf_counter()
    try:
        os.environ.update(worker_environment())
        procs = [ctx.Process(target=_worker, args=(w, cores[w % len(cores)], args, vocab_path,
                                                   weights, list(range(w, args.runs, args.workers)),
                                                   results))
                 for w in range(args.workers)]
        for proc in procs:
            proc.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    done = [results.get() for _ in procs]
    for proc in procs:
        proc.join()
    wall = time.perf_counter() - t0
    assert all(ok for _, _, ok in done), done
    tokens = sum(t for _, t, _ in done)
    return {"wall_s": wall, "target_tokens": tokens, "tokens_per_s_wall": tokens / wall,
            "workers": args.workers, "tokens_per_s_steady": None}


def main(argv: list[str] | None = None) -> int:
    from mnmt.study.loading import preset

    study = preset("default")  # the defaults are the default study's batch, vocabulary, lengths
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="micro-1", help="zoo size (default %(default)s)")
    ap.add_argument("--runs", type=int, default=5, help="runs (mixture weights) K")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch_size", type=int, default=study.schedule.batch_size)
    ap.add_argument("--vocab_size", type=int, default=study.vocab_size)
    ap.add_argument("--length", type=int, default=study.lengths["targets"],
                    help="inputs and targets feature length (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of both arms")
    ap.add_argument("--workers", type=int, default=1,
                    help="also measure the runs in this many worker processes (default 1: no)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import jax

    from mnmt.tensorflow_setup import start_tensorflow

    start_tensorflow()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    with tempfile.TemporaryDirectory() as tmp:
        vocab_path, pair_tasks, names = _setup(tmp, args.runs, args.vocab_size)
        results = {"one_at_a_time": [], "grouped": []}
        if args.workers > 1:
            results["workers"] = []
        for r in range(args.rounds):
            order = ("one_at_a_time", "grouped") if r % 2 == 0 else ("grouped", "one_at_a_time")
            for arm in order:
                results[arm].append(_arm(arm == "grouped", args, vocab_path, pair_tasks, names))
            if args.workers > 1:
                results["workers"].append(_workers_arm(args, vocab_path))
    best = {arm: max(rs, key=lambda x: x["tokens_per_s_wall"]) for arm, rs in results.items()}
    steady = {arm: best[arm]["tokens_per_s_steady"] for arm in best}
    report = {
        "benchmark": "study_throughput",
        "machine": machine(),
        "size": args.size, "runs": args.runs, "steps": args.steps, "batch_size": args.batch_size,
        "vocab_size": args.vocab_size, "length": args.length,
        "one_at_a_time": best["one_at_a_time"], "grouped": best["grouped"],
        "all_rounds": results,
        "ratio_wall": best["grouped"]["tokens_per_s_wall"] /
        best["one_at_a_time"]["tokens_per_s_wall"],
        "ratio_steady": (steady["grouped"] / steady["one_at_a_time"]
                         if steady["grouped"] and steady["one_at_a_time"] else None),
    }
    if "workers" in best:
        report["workers"] = best["workers"]
        report["ratio_workers_wall"] = (best["workers"]["tokens_per_s_wall"] /
                                        best["one_at_a_time"]["tokens_per_s_wall"])
    if args.json:
        print(json.dumps(report))
    else:
        for arm in best:
            b = best[arm]
            print(f"{arm:>14}: {b['wall_s']:7.1f} s, {b['tokens_per_s_wall']:9,.0f} target tok/s "
                  f"(steady {b['tokens_per_s_steady'] or float('nan'):9,.0f})")
        print(f"ratio (grouped / one at a time): wall {report['ratio_wall']:.2f}x, steady "
              f"{report['ratio_steady'] or float('nan'):.2f}x")
        if "ratio_workers_wall" in report:
            print(f"ratio ({args.workers} workers / one at a time): wall "
                  f"{report['ratio_workers_wall']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
