"""Grouped training from the token cache against the same group from memory, on real text.

A two-pair study on the machine's gettext catalogs (default en-de / en-fr, a ~4,000-piece
vocabulary, the training splits capped) is prepared as `mnmt-study` prepares it
(`mnmt.study.stages.prepare_data`: manifest, vocabulary, tasks, token caches). Its first group
— the 5 mixtures p ∈ {0, .3, .5, .7, 1} of one size, trained as one program with one input
iterator and prefetch thread per member — is trained through the study's own path
(`mnmt.study.spec.group_runs` → `mnmt.study.runner.make_train_config` →
`mnmt.training.trainer.train_group`) twice, same steps and seeds:

- ``cached``: the configs as the study makes them with ``StudySpec.cache_data = True`` (each
  member's streams read the task caches by index);
- ``in_memory``: the same configs without ``cache_dirs`` (``cache_data = False``: each
  training split tokenized and held in memory).

Reported per arm: the group's steady target tokens/s (at each progress report the members'
rates summed — they step together —, the median over the reports after the first, so
compilation is excluded), its wall-clock target tokens/s, and ``ratio`` = cached / in-memory
steady tokens/s. Arms alternate over ``--rounds`` (``--first``: the arm of the first round);
each arm's best round is reported.

Each arm runs in a fresh process laid out as a study worker on a CPU host
(`mnmt.study.workers`): pinned to one core (``--core``) with XLA's thread pool limited to it,
so the members' input threads and the training steps share that core, as in
``mnmt-study run --workers 2``. ``--core -1`` runs the arms unpinned (every core, XLA's pool
as configured).

    python benchmarks/speed/grouped_cache.py --json
    python benchmarks/speed/grouped_cache.py --size mini-1 --steps 200 --rounds 2 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402


def _spec(args):
    from mnmt.study.spec import StudySpec

    pairs = tuple(args.pairs.split(","))
    return StudySpec.of(
        name="bench-grouped-cache", data_preset=args.data_preset, pairs=pairs,
        data_caps=tuple((p, args.cap) for p in pairs) if args.cap else (),
        sizes=(args.size,), weights=(0.0, 0.3, 0.5, 0.7, 1.0), seeds=(0,),
        vocab_size=args.vocab_size, train_steps=args.steps, batch_size=args.batch_size,
        feature_lengths=(("inputs", args.length), ("targets", args.length)),
        eval_every=args.steps, checkpoint_every=args.steps, warmup_steps=min(50, args.steps),
        decode_at_end=False, cache_data=True, max_group=5)


def _arm(spec, data, out: Path, cached: bool, log_every: int) -> dict:
    import jax

    from mnmt.study.runner import make_train_config
    from mnmt.study.spec import expand, group_runs
    from mnmt.training.trainer import train_group

    group = group_runs(spec, expand(spec))[0]
    arm_data = data if cached else dataclasses.replace(data, cache_dir=None)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        jax.config.update("jax_compilation_cache_dir", os.path.join(tmp, "xla_cache"))
        configs = [dataclasses.replace(
            make_train_config(spec, run, arm_data, Path(tmp) / run.run_id),
            log_every=log_every, tensorboard=False) for run in group]
        assert all(bool(c.inputs.cache_dirs) == cached for c in configs)
        reports: dict[int, dict[str, float]] = {}

        def progress(event):
            if event.kind == "train" and event.tokens_per_s:
                reports.setdefault(event.step, {})[event.run_id] = float(event.tokens_per_s)

        t0 = time.perf_counter()
        summaries = train_group(configs, progress=progress)
        wall = time.perf_counter() - t0
    assert all(s.status == "finished" for s in summaries), [s.status for s in summaries]
    full = [sum(r.values()) for _, r in sorted(reports.items()) if len(r) == len(configs)]
    tokens = sum(s.tokens for s in summaries)
    return {"members": len(configs), "wall_s": wall, "target_tokens": tokens,
            "tokens_per_s_wall": tokens / wall,
            "tokens_per_s_steady": statistics.median(full[1:]) if len(full) > 1 else None,
            "reports": full}


def _run_arm(args, out: Path, arm: str) -> dict:
    """One arm in a fresh process: the study worker's layout (module docstring)."""
    import subprocess

    from mnmt.study.workers import worker_environment

    env = worker_environment() if args.core >= 0 else dict(os.environ)
    cmd = [sys.executable, os.path.abspath(__file__), *(args.argv or []), "--arm", arm,
           "--out", str(out)]
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, check=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(args) -> int:
    """The body of one arm's process: pin, register the prepared study's tasks, train."""
    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    import jax

    from mnmt.study.stages import prepare_data

    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    spec = _spec(args)
    data = prepare_data(spec, Path(args.out), lambda text: None)  # built: registers the tasks
    print(json.dumps(_arm(spec, data, Path(args.out), args.arm == "cached", args.log_every)))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default="en-de,en-fr", help="two gettext pairs (default %(default)s)")
    ap.add_argument("--data_preset", default="gettext", help="gettext or gettext:DIR")
    ap.add_argument("--cap", type=int, default=20000, help="training pairs per pair (0: all)")
    ap.add_argument("--size", default="micro-3", help="zoo size (default %(default)s)")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch_size", type=int, default=48)
    ap.add_argument("--length", type=int, default=40, help="inputs and targets feature length")
    ap.add_argument("--vocab_size", type=int, default=4000)
    ap.add_argument("--log_every", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of both arms")
    ap.add_argument("--first", choices=("cached", "in_memory"), default="cached",
                    help="the arm that runs first in the first round (default %(default)s)")
    ap.add_argument("--core", type=int, default=0,
                    help="the core each arm's process is pinned to (-1: not pinned)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--arm", choices=("cached", "in_memory"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--json"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.arm:
        return _child(args)
    from mnmt.study.stages import prepare_data

    spec = _spec(args)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mnmt-grouped-cache-") as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        data = prepare_data(spec, out, notes.append)
        prepare_s = time.perf_counter() - t0
        results: dict[str, list[dict]] = {"cached": [], "in_memory": []}
        for r in range(args.rounds):
            order = ("cached", "in_memory") if r % 2 == 0 else ("in_memory", "cached")
            order = order if args.first == "cached" else order[::-1]
            for arm in order:
                results[arm].append(_run_arm(args, out, arm))
    best = {arm: max(rs, key=lambda x: x["tokens_per_s_steady"] or 0.0)
            for arm, rs in results.items()}
    steady = {arm: best[arm]["tokens_per_s_steady"] for arm in best}
    report = {
        "benchmark": "grouped_cache", "machine": machine(),
        "pairs": spec.pairs, "train_pairs": dict(data.caps), "size": args.size,
        "weights": list(spec.weights), "steps": args.steps, "batch_size": args.batch_size,
        "length": args.length, "vocab_size": args.vocab_size, "prepare_s": prepare_s,
        "core": args.core, "first": args.first,
        "cached": best["cached"], "in_memory": best["in_memory"], "all_rounds": results,
        "ratio": (steady["cached"] / steady["in_memory"]
                  if steady["cached"] and steady["in_memory"] else None),
        "ratio_wall": best["cached"]["tokens_per_s_wall"] / best["in_memory"]["tokens_per_s_wall"],
    }
    if args.json:
        print(json.dumps(report))
    else:
        for arm in best:
            b = best[arm]
            print(f"{arm:>10}: {b['tokens_per_s_steady'] or float('nan'):9,.0f} target tok/s "
                  f"steady, {b['tokens_per_s_wall']:9,.0f} over {b['wall_s']:.1f} s wall")
        print(f"ratio (cached / in memory): steady {report['ratio'] or float('nan'):.3f}x, "
              f"wall {report['ratio_wall']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
