"""Training runs (T5X's trainer role): one run, a group of runs, and their cool-down branches.

`train(TrainConfig(...))` trains one model on one SeqIO mixture or task and writes the run
directory of docs/reference/metrics_schema.md. It resumes from the latest checkpoint of MODEL_DIR
(parameters, optimizer state, step, RNG key, input position, training-token count and the
running train-loss window), so a run killed at any step and restarted reaches the same metrics
as an uninterrupted one; it refuses to resume into a directory whose run.json describes another
run, and returns at once when the run has already finished.

A run with cool-down branches (`TrainConfig.branches`, `mnmt.training.branches`) keeps the
checkpoints of its branch points; `train` trains its branches after it, each resuming from its
point in its own run directory (first run: from the parent's checkpoint; then from its own).

`train_group([...])` trains several runs of one model that differ only in their data mixture,
seed and identity as one compiled program (a leading run axis, `jax.vmap` over the step): each
run keeps its own run directory, input pipeline, metrics, checkpoints and exact resume, and
tiny models, whose step time is mostly per-step overhead, train several times faster per run.
The steps of one group are `mnmt.training.loop.GroupLoop`'s; this module decides which runs
train together, in which order, and what the runs that do not start report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import jax

from mnmt.tensorflow_setup import start_tensorflow
from mnmt.training import branches, checkpoints, distributed, run_files, tracking
from mnmt.training.config import TrainConfig
from mnmt.training.loop import COMPLETE_STATUSES, GroupLoop, TrainSummary, checkpoint_dir, stop_at
from mnmt.training.progress import ProgressEvent, print_progress
from mnmt.training.run_setup import build_setup, final_losses, final_metrics

__all__ = ["TrainSummary", "train", "train_group", "train_with_branches", "check_groupable",
           "GROUP_FIELDS", "reached"]

# What may differ between the runs of one group; everything else must be equal.
GROUP_FIELDS = ("model_dir", "run_id", "seed", "study", "mixture_weights", "mixture_caps",
                "extra", "inputs.mixture_or_task_name", "branches.parent_dir",
                "tracking.wandb_name")


def train(config: TrainConfig, *,
          progress: Callable[[ProgressEvent], None] | None = None) -> TrainSummary:
    """Train (or resume, or skip a finished) run and its branches; see the module docstring.
    The summary is the run's; its branches' are in `summary.branches`."""
    summaries = train_with_branches([config], progress=progress)
    summaries[0].branches = summaries[1:]
    return summaries[0]


def train_with_branches(configs: list[TrainConfig], *,
                        progress: Callable[[ProgressEvent], None] | None = None
                        ) -> list[TrainSummary]:
    """`train_group(configs)`, then the runs' cool-down branches, one group per branch step.

    Summaries: one per config, then one per branch (step by step, runs in `configs` order).
    Branches start only when every run finished; after a branch group that stops unfinished,
    the later ones are reported "preempted", not started."""
    summaries = train_group(configs, progress=progress)
    stopped = next((s for s in summaries if s.status not in COMPLETE_STATUSES), None)
    by_step: dict[int, list[TrainConfig]] = {}
    for config in configs:
        for branch in branches.branch_configs(config):
            by_step.setdefault(branch.branches.parent_step, []).append(branch)
    for _, group in sorted(by_step.items()):
        if stopped is not None:
            summaries += [TrainSummary(c.run_id or os.path.basename(c.model_dir), c.model_dir,
                                       "preempted", 0, {}, 0.0,
                                       message=f"not started: run {stopped.run_id} "
                                               f"{stopped.status}") for c in group]
            continue
        done = train_group(group, progress=progress)
        summaries += done
        stopped = next((s for s in done if s.status not in COMPLETE_STATUSES), None)
    return summaries


def reached(existing: dict[str, Any] | None, config: TrainConfig) -> str:
    """"finished" or "stopped" when a run's run.json (`existing`) says it already trained as far
    as `config` asks (its end; or, stopped early, at least to `config`'s stop step), else ""."""
    status = (existing or {}).get("status")
    if status == "finished":
        return "finished"
    if status == "stopped" and stop_at(config) < config.train_steps and \
            int(existing.get("final_step", 0)) >= stop_at(config):
        return "stopped"
    return ""


def check_groupable(configs: list[TrainConfig]) -> None:
    """Raise ValueError naming the first field (other than GROUP_FIELDS) in which runs differ."""
    if not configs:
        raise ValueError("train_group needs at least one TrainConfig")

    def shared(config: TrainConfig) -> dict[str, Any]:
        d = config.to_dict()
        for name in GROUP_FIELDS:
            section, _, field = name.rpartition(".")
            (d[section] if section else d).pop(field)
        return d

    first = shared(configs[0])
    for config in configs[1:]:
        other = shared(config)
        for key in first:
            if first[key] != other[key]:
                raise ValueError(f"runs {configs[0].model_dir} and {config.model_dir} differ in "
                                 f"{key} ({first[key]!r} vs {other[key]!r}): only "
                                 f"{', '.join(GROUP_FIELDS)} may differ within a group")


def train_group(configs: list[TrainConfig], *,
                progress: Callable[[ProgressEvent], None] | None = None) -> list[TrainSummary]:
    """Train runs of one model together (see the module docstring); one summary per config.

    Finished runs are skipped; the others are grouped by their latest checkpoint step, so a
    group interrupted between two runs' checkpoints resumes as two groups. A group that stops
    unfinished (signal, divergence) stops here: later groups report "preempted", not started.
    """
    t_start = time.perf_counter()
    start_tensorflow()  # SeqIO's backend: sees no GPU (JAX owns the accelerators), quiet start-up
    distributed.initialize()  # no-op unless this is a multi-process job
    check_groupable(configs)
    for config in configs:  # before any work: a bad TrackingConfig or no wandb stops here
        tracking.check_tracking(config)
    progress = progress or print_progress
    setups = [build_setup(config) for config in configs]
    primary = jax.process_index() == 0
    summaries: list[TrainSummary | None] = [None] * len(configs)
    by_step: dict[int, list[int]] = {}
    for i, (config, setup) in enumerate(zip(configs, setups, strict=True)):
        done = reached(setup.existing, config)
        if done:
            summaries[i] = TrainSummary(
                setup.run_id, config.model_dir, done,
                int(setup.existing.get("final_step", config.train_steps)),
                final_losses(config.model_dir, setup.first_eval_set),
                time.perf_counter() - t_start,
                tokens=int(setup.existing.get("final_tokens", 0)), message=f"already {done}",
                final_metrics=final_metrics(config.model_dir))
            continue
        latest = checkpoints.Checkpointer.latest_in(checkpoint_dir(config.model_dir))
        by_step.setdefault(-1 if latest is None else latest, []).append(i)
    stopped = ""
    for _, members in sorted(by_step.items(), reverse=True):  # the furthest runs first
        if stopped:
            for i in members:
                summaries[i] = TrainSummary(setups[i].run_id, configs[i].model_dir, "preempted",
                                            0, {}, time.perf_counter() - t_start,
                                            message=f"not started: {stopped}")
            continue
        # The loop reads every member's metrics.jsonl first: a garbled line stops here, before
        # run.json or anything else is written (run_files.RunFileError).
        loop = GroupLoop([configs[i] for i in members], [setups[i] for i in members], progress,
                     primary)
        try:
            if primary:
                for i in members:
                    run_files.write_run_json(configs[i].model_dir, setups[i].run_json)
            results = loop.run(t_start)
        finally:
            loop.close()
        for i, summary in zip(members, results, strict=True):
            summaries[i] = summary
            if summary.status not in COMPLETE_STATUSES and not stopped:
                stopped = f"run {summary.run_id} {summary.status}"
    return summaries  # type: ignore[return-value]
