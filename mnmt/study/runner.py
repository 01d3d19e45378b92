"""Run a study's runs on this host (CPU, or one multi-device host), a group of sizes at a time.

Each run writes its own run directory
(docs/reference/metrics_schema.md), so a study interrupted at any point resumes where it stopped: finished
runs are skipped and an unfinished run continues from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

from fitting.data import io
from mnmt.study import train_options
from mnmt.study.progress import StudyProgress
from mnmt.study.spec import (
    RunSpec,
    StudySpec,
    branch_groups,
    field_names,
    group_runs,
    with_branches,
)
from mnmt.study.spec_sections import field_value


@dataclasses.dataclass(frozen=True)
class StudyData:
    """What the data stage of a study produced, shared by all of its runs."""

    vocabulary_path: str
    tasks: dict[str, str]  # pair -> SeqIO task name
    irreducible_loss: dict[str, dict[str, float]]  # pair -> eval set -> exact L∞ (nats/token)
    # pair -> training-set size D_i of its task (None: an endless stream); the runs' data_size
    caps: dict[str, int | None] = dataclasses.field(default_factory=dict)
    # directory of the tasks' token caches ("" = none): the runs' InputConfig.cache_dirs
    cache_dir: str = ""


class RunStopped(Exception):
    """A run ended without finishing: stopped by a signal (checkpointed) or diverged. The study
    stops there too, instead of going on to the next run."""

    def __init__(self, run_id: str, status: str, message: str,
                 signal_number: int | None = None) -> None:
        super().__init__(f"run {run_id} {status}: {message}" if message else f"run {run_id} {status}")
        self.run_id, self.status, self.message = run_id, status, message
        self.signal_number = signal_number  # the signal that stopped a preempted run, if known


def seqio_name(text: str) -> str:
    """A SeqIO-safe registry name (letters, digits, '_', '.', ':')."""
    return re.sub(r"[^\w.:]", "_", text)


def run_status(run_dir: Path) -> str | None:
    """`finished`, `running` (started, not finished) or None (never started)."""
    path = run_dir / "run.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text()).get("status", "running")
    except json.JSONDecodeError:
        return "running"  # a run.json being rewritten; the trainer decides whether it can resume


def run_complete(spec: StudySpec, run: RunSpec, runs_dir: Path) -> bool:
    """Whether `run` has trained as far as `spec` asks: finished, or stopped early at (or
    after) its stop step (`StudySpec.stop_fraction`; a stopped run is not complete once the
    study asks for its end, and resumes from its checkpoint)."""
    run_dir = runs_dir / run.run_id
    status = run_status(run_dir)
    if status == "finished":
        return True
    stop = spec.stop_step_for(run)
    if status != "stopped" or run.parent or stop >= spec.steps_for(run.size):
        return False
    try:
        return int(json.loads((run_dir / "run.json").read_text()).get("final_step", 0)) >= stop
    except (OSError, ValueError):
        return False


def register_run_mixture(spec: StudySpec, run: RunSpec, data: StudyData) -> str:
    """Register (idempotently) the SeqIO mixture of one run's weights and return its name."""
    from mnmt.data import mixtures

    tag = run.run_id.split("_", 1)[1].rsplit("_", 1)[0]  # e.g. "p0.50" or "w0.20-0.30-0.50"
    name = seqio_name(f"{spec.name}_{tag}")
    trained = {data.tasks[pair]: w for pair, w in run.weights.items() if w > 0}
    return mixtures.register_weighted_mixture(name, trained)


def make_train_config(spec: StudySpec, run: RunSpec, data: StudyData, run_dir: Path,
                      mixture_name: str | None = None):
    """The trainer configuration of one run of `spec`; its SeqIO mixture is registered unless
    `mixture_name` is given (`mnmt.study.mesh_plan` compiles a step and reads no data).

    TrainConfig fields with a StudySpec field of the same name (learning_rate, warmup_steps,
    decay, cooldown_shape, dropout_rate, activation_dtype, remat_policy, partitioning_rules, and
    any added later) take its value; `spec.train_overrides` are applied last
    (`mnmt.study.train_options`)."""
    from mnmt.training.config import (  # light: configuration only
        BranchConfig,
        CheckpointConfig,
        DecodeConfig,
        EvalConfig,
        InputConfig,
        OptimizerConfig,
        TrainConfig,
    )

    settings = dict(
        model_dir=str(run_dir),
        model_size=run.size,
        vocabulary_path=data.vocabulary_path,
        train_steps=spec.steps_for(run.size),
        stop_step=0 if run.parent or spec.stop_step_for(run) >= spec.steps_for(run.size)
        else spec.stop_step_for(run),
        inputs=InputConfig(
            mixture_or_task_name=mixture_name or register_run_mixture(spec, run, data),
            feature_lengths=spec.lengths,
            batch_size=spec.schedule.batch_size,
            batch_tokens=spec.schedule.batch_tokens or None,
            cache_dirs=(data.cache_dir,) if data.cache_dir else (),
        ),
        eval=EvalConfig(
            tasks={pair: data.tasks[pair] for pair in spec.pairs},
            sets=tuple(spec.evaluation.eval_sets),
            period=spec.evaluation.eval_every,
            probe_every=spec.evaluation.probe_every,
            probe_examples=spec.evaluation.probe_examples,
        ),
        decode=DecodeConfig(at_end=spec.evaluation.decode_at_end,
                            num_examples=spec.evaluation.num_decode_examples),
        checkpoint=CheckpointConfig(period=spec.compute.checkpoint_every),
        cooldown_steps=spec.cooldown_for(run.size),
        branches=BranchConfig(points=tuple(spec.branches.cooldown_branches),
                              cooldown_fraction=spec.branches.branch_cooldown_fraction or None),
        optimizer=OptimizerConfig(momentum=float(spec.schedule.momentum))
        if spec.schedule.momentum else None,
        seed=run.seed,
        run_id=run.run_id,
        study=spec.name,
        mixture_weights=dict(run.weights),
        mixture_caps={pair: data.caps.get(pair) for pair in spec.pairs},
        extra={"irreducible_loss": data.irreducible_loss, "data_preset": spec.data_preset,
               "heldout": run.heldout, "mixture": run.mixture},
    )
    for name in train_options.same_name_fields(field_names()):
        settings.setdefault(name, field_value(spec, name))
    return train_options.apply(TrainConfig(**settings), spec.train_overrides)


def branch_train_configs(spec: StudySpec, branches: list[RunSpec], data: StudyData,
                         runs_dir: Path) -> list:
    """The trainer configurations of cool-down branches (`mnmt.training.branches`): each its
    parent's configuration, branched at its step."""
    from mnmt.training.branches import branch_configs  # noqa: PLC0415

    out = []
    for branch in branches:
        parent = dataclasses.replace(branch, run_id=branch.parent, parent="", branch_step=0,
                                     cooldown_steps=0)
        config = make_train_config(spec, parent, data, runs_dir / branch.parent)
        out.append(next(c for c in branch_configs(config)
                        if c.branches.parent_step == branch.branch_step))
    return out


def run_all(
    spec: StudySpec,
    runs: list[RunSpec],
    data: StudyData,
    runs_dir: Path,
    progress: StudyProgress,
) -> list[Path]:
    """Train every run of the study that has not finished; return all run directories (with
    their cool-down branches').

    Runs of one size train together in groups of up to `spec.compute.max_group` (one vmapped program,
    each run in its own directory); a group's branches follow it, one group per branch step. Raises RunStopped as soon as a run ends unfinished (a signal
    asked it to stop, or it diverged), or, with status "unreadable", when a run's files cannot be
    read (a run.json or metrics.jsonl line that is not valid JSON, no checkpoint that restores):
    the message names the file and line, and the trainer has written nothing; or, with the same
    status, when a write fails for lack of space (`fitting.data.io.NoSpaceError`, naming the file;
    what was on disk before is intact and a re-run resumes).
    """
    for group in group_runs(spec, runs):
        for members in [group, *branch_groups(spec, group)]:
            pending = []
            for run in members:
                if run_complete(spec, run, runs_dir):
                    progress.skip_run(run.run_id)
                else:
                    pending.append(run)
            if pending:
                _train_group(spec, pending, data, runs_dir, progress)
    return [runs_dir / run.run_id for run in with_branches(spec, runs)]


def _train_group(spec: StudySpec, pending: list[RunSpec], data: StudyData, runs_dir: Path,
                 progress: StudyProgress) -> None:
    """Train one group of runs (or of branches, after their parents); see `run_all`."""
    from mnmt.training.checkpoints import CheckpointRestoreError  # heavy: jax, orbax
    from mnmt.training.run_files import RunFileError
    from mnmt.training.trainer import train_group  # heavy: jax, flax, seqio

    progress.start_group([run.run_id for run in pending])
    start = time.monotonic()
    if pending[0].parent:
        configs = branch_train_configs(spec, pending, data, runs_dir)
    else:
        configs = [make_train_config(spec, run, data, runs_dir / run.run_id) for run in pending]
    try:
        summaries = train_group(configs, progress=progress.update)
    except (RunFileError, CheckpointRestoreError, io.NoSpaceError) as err:
        message = str(err).strip().splitlines()[0]
        named = [run for run in pending if str(runs_dir / run.run_id) in message]
        raise RunStopped((named or pending)[0].run_id, "unreadable", message) from err
    unfinished = [s for s in summaries if s.status not in ("finished", "stopped")]
    if unfinished:  # preempted (checkpointed) or diverged: the diverged one is named first
        first = sorted(unfinished, key=lambda s: s.status != "diverged")[0]
        raise RunStopped(first.run_id, first.status, first.message, first.stop_signal)
    wall = time.monotonic() - start
    for run, summary in zip(pending, summaries, strict=True):
        losses = getattr(summary, "final_eval", {}) or {}
        text = ", ".join(f"{pair} loss {value:.3f}" for pair, value in losses.items())
        progress.finish_run(run.run_id, text, wall_s=wall)
