"""Probe evaluations: what they cost a group of the default study, and how much less their curve
scatters than the train_loss rows'.

The runs of one size of the default study (`mnmt-study run`; `--size`, default mini-1: its five
weights and two seed repeats, trained as one group by `mnmt.training.trainer.train_group` as
the study trains them), shortened to `--steps` (the schedule's warm-up, 20 % cool-down and
evaluation period as in the study; no cool-down branches), are trained twice with the same
seeds: probes off (`StudySpec.probe_every = 0`) and on (`--probe-every`, `--probe-examples`).
`--rounds` repeats the two, order alternated, after an untimed short run that builds the
process's cached eval batches for both. Reported:

- per arm: wall seconds (everything: set-up, compilation, steps, evaluations, probes,
  checkpoints), the steady steps/s the trainer reports (compilation excluded; probes, like
  evaluations, left out of its rate windows) and, on, the seconds the group spent probing
  (`TrainSummary.probe_s`, timed around each probe, set-up included);
- `ratio_wall` = wall on / wall off (medians over rounds): the cost as measured, which on a
  shared machine carries the other processes' noise (as large as the probes' cost);
  `probe_share` = probe_s / (wall on − probe_s): the extra wall the probes cost, both terms
  timed in the same process over the same minutes, so the machine's load cancels;
  `probe_steps` = the time of one probe over a training step of the group, both timed in the
  probe-on arm (steps: the loop's time between its first and last logged steps less its
  evaluations and probes; `loop_times`) — what a probe costs in training steps — and
  `projected_share` = probe_steps / probe_every: the probes' share of the training steps
  alone, an upper bound of their share of a run of any length;
- scatter, from the probe-on arm, per run and trained pair over the stable phase the report's
  curve laws fit (from 40 % of the steps to the start of the cool-down): the relative sd of each curve's points about a
  smooth fit (log loss quadratic in log step), for the train_loss rows of the pair and for its
  probe_loss rows, and the same from second differences (sd(Δ² log loss)/√6, no fit); medians
  over the runs' pairs and their ratio.

    python benchmarks/speed/probe_cost.py --json            # the study's 2,000 steps
    python benchmarks/speed/probe_cost.py --size micro-1 --steps 600 --rounds 2 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402


def study_spec(steps: int, probe_every: int, probe_examples: int):
    """The default study shortened to `steps`, without cool-down branches, probing or not."""
    from mnmt.study.loading import preset

    return preset("default").replace(train_steps=steps, cooldown_branches=(),
                               probe_every=probe_every, probe_examples=probe_examples)


def train_arm(spec, size: str, data, out: Path) -> dict:
    """Train the runs of `size` as one group under `out`; wall seconds and steady steps/s."""
    from mnmt.study.runner import make_train_config
    from mnmt.study.spec import expand
    from mnmt.training.trainer import train_group

    runs = [r for r in expand(spec) if r.size == size and not r.heldout]
    configs = [make_train_config(spec, r, data, out / r.run_id) for r in runs]
    rates: list[float] = []
    events: list[tuple[float, str, int]] = []  # (time, kind, step) of the group's events

    def progress(event) -> None:
        events.append((time.perf_counter(), event.kind, int(event.step)))
        if event.kind == "train" and event.steps_per_s:
            rates.append(float(event.steps_per_s))

    start = time.perf_counter()
    summaries = train_group(configs, progress=progress)
    wall = time.perf_counter() - start
    if any(s.status != "finished" for s in summaries):
        raise RuntimeError(f"a run did not finish: {[s.message for s in summaries]}")
    steady = float(np.median(rates[len(rates) // 4:])) if rates else float("nan")
    return {"wall_s": wall, "steady_steps_per_s": steady, "runs": len(runs),
            "probe_s": summaries[0].probe_s, **loop_times(events, spec),
            "dirs": [c.model_dir for c in configs]}


def loop_times(events: list[tuple[float, str, int]], spec) -> dict:
    """Seconds of the training loop between its first and last logged steps (compilation,
    the last step's evaluation, decoding and the final files outside), and the part of them
    spent in evaluations (from an evaluation step's training event to its last eval event);
    probes at the steps inside are the rest of what is not training steps."""
    train = {}
    for t, kind, step in events:
        if kind == "train":
            train.setdefault(step, t)
    first, last = min(train), max(train)
    evals = 0.0
    for step in range(spec.evaluation.eval_every, last, spec.evaluation.eval_every):
        ends = [t for t, kind, s in events if kind == "eval" and s == step]
        if step > first and step in train and ends:
            evals += max(ends) - train[step]
    inside = len([s for s in range(first + 1, last) if spec.evaluation.probe_every
                  and s % spec.evaluation.probe_every == 0])
    return {"loop_s": train[last] - train[first], "loop_steps": last - first,
            "loop_eval_s": evals, "loop_probes": inside}


def smooth_scatter(steps: np.ndarray, loss: np.ndarray) -> float:
    """Relative sd of the points about a quadratic fit of log loss in log step."""
    x, y = np.log(steps), np.log(loss)
    resid = y - np.polyval(np.polyfit(x, y, 2), x)
    return float(np.sqrt(np.sum(resid ** 2) / max(len(y) - 3, 1)))


def second_difference_scatter(loss: np.ndarray) -> float:
    """sd(Δ² log loss)/√6: the points' relative sd where the curve is locally linear."""
    return float(np.std(np.diff(np.log(loss), n=2), ddof=1) / np.sqrt(6.0))


def scatter(run_dirs: list[str], steps: int, cooldown: int) -> dict:
    """Median scatter of the train_loss and probe_loss curves of the trained pairs (module
    docstring), over the stable phase [0.4 steps, steps − cooldown]."""
    from mnmt.training import run_files

    lo, hi = 0.4 * steps, steps - cooldown
    found: dict[str, list[float]] = {}
    for d in run_dirs:
        rows = run_files.read_metrics(d)
        weights = run_files.read_run_json(d)["mixture"]["weights"]
        for pair, w in weights.items():
            if w <= 0:
                continue
            for metric in ("train_loss", "probe_loss"):
                pts = sorted((r["step"], r["value"]) for r in rows if r["metric"] == metric
                             and r["task"] == pair and lo <= r["step"] <= hi)
                if len(pts) < 5:
                    continue
                s, v = np.array(pts, dtype=np.float64).T
                found.setdefault(f"{metric}_smooth", []).append(smooth_scatter(s, v))
                found.setdefault(f"{metric}_d2", []).append(second_difference_scatter(v))
    out = {k: float(np.median(v)) for k, v in found.items()}
    out["curves"] = len(found.get("probe_loss_smooth", []))
    for kind in ("smooth", "d2"):
        if f"probe_loss_{kind}" in out and f"train_loss_{kind}" in out:
            out[f"ratio_{kind}"] = out[f"probe_loss_{kind}"] / out[f"train_loss_{kind}"]
    return out


def run(args: argparse.Namespace) -> dict:
    from mnmt.study.data_stage import prepare_data

    off = study_spec(args.steps, 0, args.probe_examples)
    on = study_spec(args.steps, args.probe_every, args.probe_examples)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = prepare_data(off, root, lambda line: print(line, file=sys.stderr))
        # untimed: builds the process's cached eval batches, which both arms then find
        train_arm(study_spec(args.probe_every, args.probe_every, args.probe_examples),
                  args.size, data, root / "warmup")
        arms: dict[str, list[dict]] = {"off": [], "on": []}
        last_on: list[str] = []
        for r in range(args.rounds):
            order = [("off", off), ("on", on)]
            for name, spec in order[r % 2:] + order[:r % 2]:
                res = train_arm(spec, args.size, data, root / f"{name}{r}")
                print(f"round {r} {name}: {res['wall_s']:.1f} s, "
                      f"{res['steady_steps_per_s']:.2f} steps/s, probes {res['probe_s']:.1f} s",
                      file=sys.stderr)
                if name == "on":
                    last_on = res["dirs"]
                arms[name].append({k: v for k, v in res.items() if k != "dirs"})
        noise = scatter(last_on, args.steps, on.cooldown_for(args.size))
    wall = {k: float(np.median([a["wall_s"] for a in v])) for k, v in arms.items()}
    probes = -(-args.steps // args.probe_every)  # every probe_every steps and the last
    share = float(np.median([a["probe_s"] / (a["wall_s"] - a["probe_s"]) for a in arms["on"]]))
    probe_s = float(np.median([a["probe_s"] for a in arms["on"]])) / probes
    step_s = float(np.median([(a["loop_s"] - a["loop_eval_s"] - a["loop_probes"] * probe_s)
                              / a["loop_steps"] for a in arms["on"]]))
    return {"size": args.size, "steps": args.steps, "probe_every": args.probe_every,
            "probe_examples": args.probe_examples, "rounds": args.rounds, "arms": arms,
            "ratio_wall": wall["on"] / wall["off"], "probe_share": share,
            "probes": probes, "probe_s": probe_s,
            "probe_steps": probe_s / step_s,
            "projected_share": probe_s / step_s / args.probe_every,
            "scatter": noise, "machine": machine()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="mini-1", help="a size of the default study")
    p.add_argument("--steps", type=int, default=2000, help="steps of each run (the study's)")
    p.add_argument("--probe-every", type=int, default=50)
    p.add_argument("--probe-examples", type=int, default=128)
    p.add_argument("--rounds", type=int, default=1, help="off/on pairs, order alternated")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    res = run(args)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{args.size}, {args.steps} steps: wall on/off {res['ratio_wall']:.3f}, probes "
              f"{res['probe_share']:.1%} of the rest, "
              f"{res['probe_steps']:.1f} steps per probe, projected share "
              f"{res['projected_share']:.1%}; scatter {res['scatter']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
