"""Cool-down branches: several training budgets D from one run (Hägele et al. 2024, §3–4).

With a warm-up–stable–decay schedule the rate before the cool-down depends on the step only
(`mnmt.training.optimizer.learning_rate_schedule`, constant or rsqrt stable phase; not cosine,
which depends on the run's length). A run that keeps its checkpoint at step b can therefore be
*branched* there: the branch resumes from that checkpoint
(parameters, optimizer state, RNG key, input position, token count) and cools the rate down to 0
over c_b steps, ending at D_b = b + c_b. With the run's own cool-down share f = c/T it is, step
for step, the run that would have been trained for D_b steps — so one run of T steps yields the
cooled-down loss at every budget D_b as well as at T, for the cost of the cool-downs only.

A branch is a run of its own: directory ``MODEL_DIR_cd<b>`` beside the parent's, a run.json
whose ``branch`` object names the parent and b (docs/reference/metrics_schema.md), its own
metrics.jsonl (rows after step b only; ``tokens`` counts from the parent's step 0) and
checkpoints, so it resumes exactly after a kill and is skipped once finished.

This module is configuration only and imports no jax: the trainer (`mnmt.training.trainer`) keeps the
branch points' checkpoints and trains the branches; studies (`mnmt.study`) plan them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # the config module imports optax and jax
    from mnmt.training.config import TrainConfig

__all__ = ["BRANCH_SUFFIX", "BranchError", "BranchFields", "TRAIN_CONFIG_FIELDS", "resolve_branch_steps", "resolve_cooldown_share",
           "cooldown_steps_at", "branch_steps", "cooldown_share", "branch_cooldown", "branch_dir",
           "branch_run_id", "branch_configs", "is_branch"]

# A branch's run directory and run id: the parent's with this suffix and the branch step.
BRANCH_SUFFIX = "_cd"


class BranchError(ValueError):
    """Branch points that cannot be trained; the message names the field and the values."""


class BranchFields(NamedTuple):
    """The names errors give the branch points, the branches' cool-down share and the run's own
    cool-down (a StudySpec names its own fields: `mnmt.study.spec`)."""

    points: str
    cooldown_fraction: str
    run_cooldown: str
    decay: str = "decay"


TRAIN_CONFIG_FIELDS = BranchFields("BranchConfig.points", "BranchConfig.cooldown_fraction",
                                   "cooldown_steps", "decay")


def _point_step(point: float, train_steps: int, fields: BranchFields) -> int:
    """A branch point as a step: a fraction 0 < x < 1 of `train_steps`, or a step number."""
    if isinstance(point, bool) or not isinstance(point, int | float) or not math.isfinite(point):
        raise BranchError(f"{fields.points}: expected fractions in (0, 1) or step numbers, "
                          f"got {point!r}")
    if isinstance(point, float) and 0 < point < 1:
        return int(round(point * train_steps))
    if float(point).is_integer() and point >= 1:
        return int(point)
    raise BranchError(f"{fields.points}: expected a fraction in (0, 1) or a step number "
                      f"≥ 1, got {point!r}")


def resolve_cooldown_share(train_steps: int, cooldown_steps: int,
                           cooldown_fraction: float | None = None,
                           fields: BranchFields = TRAIN_CONFIG_FIELDS) -> float:
    """f, the share of a branch's steps its cool-down takes: `cooldown_fraction`, else the run's
    own cooldown_steps / train_steps; BranchError when it is not in (0, 1), naming
    `fields.cooldown_fraction` when the share was given, else `fields.points`."""
    f = cooldown_fraction
    if f is None:
        f = cooldown_steps / train_steps
    if not 0 < f < 1:  # name the field that was set: the share, else the branch points
        named = fields.cooldown_fraction if cooldown_fraction is not None else fields.points
        raise BranchError(
            f"{named}: a branch needs a cool-down share in (0, 1), got "
            f"{f!r}" + ("" if cooldown_fraction is not None else
                        f" (the run's own share: cooldown_steps {cooldown_steps} / "
                        f"train_steps {train_steps}; give the run a cool-down "
                        f"({fields.run_cooldown}) or set {fields.cooldown_fraction})"))
    return float(f)


def resolve_branch_steps(points, train_steps: int, cooldown_steps: int,
                         cooldown_fraction: float | None = None,
                         fields: BranchFields = TRAIN_CONFIG_FIELDS,
                         decay: str = "rsqrt") -> list[int]:
    """Branch points (fractions of `train_steps` or steps) as steps, ascending; BranchError
    naming `fields` when one lies outside 1 ≤ b < train_steps − cooldown_steps (a branch leaves
    before the run's own cool-down), there is no cool-down share (`resolve_cooldown_share`) or
    the schedule's `decay` is "cosine" (its rate at every step depends on train_steps, so the run
    trained for D_b steps is not the parent until b: no branch can stand for it)."""
    if not points:
        return []
    if decay == "cosine":
        raise BranchError(
            f"{fields.points}: cool-down branches need a rate that depends on the step only "
            f"until the cool-down, but {fields.decay}='cosine' depends on train_steps at every "
            f"step; use 'constant' with a cool-down (warm-up–stable–decay) or 'rsqrt', or no "
            f"branches")
    stable_end = train_steps - cooldown_steps
    steps = sorted({_point_step(p, train_steps, fields) for p in points})
    for step in steps:
        if not 1 <= step < stable_end:
            raise BranchError(
                f"{fields.points}: branch step {step} of {list(points)} is outside "
                f"[1, {stable_end}): a branch must leave before the run's own cool-down "
                f"(train_steps {train_steps} − cooldown_steps {cooldown_steps})")
    resolve_cooldown_share(train_steps, cooldown_steps, cooldown_fraction, fields)  # fails early
    return steps


def cooldown_steps_at(step: int, share: float) -> int:
    """c_b: cool-down steps of the branch leaving at `step`, round(b·f / (1 − f)) (at least 1),
    so that the cool-down is the share f of the branch's D_b = b + c_b steps."""
    return max(1, int(round(step * share / (1.0 - share))))


def cooldown_share(config: TrainConfig) -> float:
    """`resolve_cooldown_share` of a TrainConfig."""
    return resolve_cooldown_share(config.train_steps, config.cooldown_steps,
                                  config.branches.cooldown_fraction)


def branch_steps(config: TrainConfig) -> list[int]:
    """`resolve_branch_steps` of a TrainConfig: its branch points as steps."""
    return resolve_branch_steps(config.branches.points, config.train_steps,
                                config.cooldown_steps, config.branches.cooldown_fraction,
                                decay=config.decay)


def branch_cooldown(config: TrainConfig, step: int) -> int:
    """`cooldown_steps_at` with the TrainConfig's cool-down share."""
    return cooldown_steps_at(step, cooldown_share(config))


def branch_dir(model_dir: str, step: int) -> str:
    """The run directory of the branch leaving `model_dir`'s run at `step`."""
    return model_dir.rstrip("/" + os.sep) + f"{BRANCH_SUFFIX}{step}"


def branch_run_id(run_id: str, step: int) -> str:
    """The run id of the branch leaving run `run_id` at `step`."""
    return f"{run_id}{BRANCH_SUFFIX}{step}"


def is_branch(config: TrainConfig) -> bool:
    """Whether `config` is a branch (it starts from a parent's checkpoint)."""
    return bool(config.branches.parent_dir)


def branch_configs(config: TrainConfig) -> list[TrainConfig]:
    """The TrainConfig of every branch of `config`, in the order of their steps.

    A branch is `config` with its own directory and run id, D_b = b + c_b steps of which the
    last c_b cool down, no branches of its own, the parent's decode steps after b only, and
    `branches.parent_dir` / `parent_step` naming where it starts. A run stopped early
    (`TrainConfig.stop_step`) has no branch after its stop (its checkpoint never exists)."""
    from mnmt.training.config import BranchConfig  # noqa: PLC0415 (jax, optax)

    out = []
    for step in branch_steps(config):
        if 0 < config.stop_step < step:  # no checkpoint to leave from: the run stops before
            continue
        cooldown = branch_cooldown(config, step)
        out.append(dataclasses.replace(
            config,
            model_dir=branch_dir(config.model_dir, step),
            run_id=branch_run_id(config.run_id, step) if config.run_id else "",
            train_steps=step + cooldown,
            cooldown_steps=cooldown,
            stop_step=0,
            # every field given: gin bindings of BranchConfig must not reach a branch
            branches=BranchConfig(points=(), cooldown_fraction=None, parent_dir=config.model_dir,
                                  parent_step=step),
            checkpoint=dataclasses.replace(config.checkpoint, keep_steps=()),
            decode=dataclasses.replace(config.decode, steps=tuple(
                s for s in config.decode.steps if step < s <= step + cooldown)),
        ))
    return out
