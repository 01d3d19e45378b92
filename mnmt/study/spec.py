"""Studies: a grid of model sizes x mixture weights x seeds, expanded into runs.

A study follows Fernandes et al. 2023 §3: every language pair is trained in mixtures whose
sampling weights vary over a grid (two pairs: p for the first pair and 1 - p for the second;
K pairs: points of a simplex grid), every model size of a zoo is trained on every mixture, and
every run is evaluated on every pair (p = 0 still means "evaluated, not trained").

`StudySpec` is gin-configurable, so a study is a gin file in `t5x_configs/studies/` (the main job
among them: cpu_default.gin, preset `default`); the `ci` miniature is a plain Python value in
`PRESETS`.

Validation lives in `mnmt.study.spec_checks` and the expansion into runs in
`mnmt.study.expansion`; their public names are importable from here too.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import gin

from mnmt.study.expansion import (
    RunSpec,
    branch_check_runs,
    branch_groups,
    branch_runs,
    expand,
    group_runs,
    mixture_count,
    progress_entries,
    run_id,
    size_weights,
    stop_check_runs,
    stop_savings,
    stopped_runs,
    training_groups,
    with_branches,
)
from mnmt.study.spec_checks import BRANCH_FIELDS, StudyError, mixture_weights, validate
from mnmt.study.spec_sections import (
    Branches,
    Cache,
    Compute,
    EarlyStop,
    Evaluation,
    HeldOut,
    MixtureDesign,
    Schedule,
    Verification,
)
from mnmt.training import branches  # light: configuration only

__all__ = [
    "FERNANDES_TWO_PAIR_GRID", "PRESETS", "PRESET_SUMMARIES", "RunSpec", "StudyError", "StudySpec",
    "branch_check_runs", "branch_groups", "branch_runs", "expand", "group_runs", "mixture_count", "mixture_weights",
    "progress_entries", "run_id", "simplex_grid", "size_weights", "stop_check_runs", "stop_savings",
    "stopped_runs", "training_groups", "validate", "with_branches",
]

# Fernandes et al. 2023 §3.2: weights of the first pair in two-pair mixtures.
FERNANDES_TWO_PAIR_GRID: tuple[float, ...] = (0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1.0)


@gin.configurable("StudySpec")
@dataclasses.dataclass(frozen=True)
class StudySpec(Verification, Compute, Cache, MixtureDesign, HeldOut, Evaluation, EarlyStop,
                Branches, Schedule):
    """Everything that defines a study. Sizes and weights span the grid; the rest is shared.

    The grid's fields are declared here; the others by topic in the sections it is composed of
    (`mnmt.study.spec_sections`: Schedule, Branches, EarlyStop, Evaluation, HeldOut,
    MixtureDesign, Cache, Compute, Verification), each field still `StudySpec.FIELD` in gin, in
    study.json and as an attribute.

    `weights` holds one entry per mixture: a number p (two pairs: p for `pairs[0]`, 1 - p for
    `pairs[1]`) or a sequence with one weight per pair (any number of pairs; normalised to sum 1).
    """

    name: str = "cpu-default"
    # Synthetic data preset (mnmt.data.synthetic), used unless `tasks` names registered tasks.
    data_preset: str = "cpu-tiny"
    # Real data: pair -> registered SeqIO task name, the module that registers them (imported
    # first, as T5X's MIXTURE_OR_TASK_MODULE) and their SentencePiece vocabulary.
    tasks: tuple[tuple[str, str], ...] = ()
    task_module: str = ""
    vocabulary_path: str = ""
    pairs: tuple[str, ...] = ("en-de", "en-zh")
    # On cpu-tiny, mini-1 … mini-4 all reach nearly the same loss; the size law is measurable from
    # the micro sizes up to mini-1/mini-2 (see docs/guides/studies.md).
    sizes: tuple[str, ...] = ("micro-1", "micro-2", "micro-3", "mini-1", "mini-2")
    # p of the first pair: 0 and 1 are the single-pair baselines that eq. 10 (f(p)) needs.
    weights: tuple = (0.0, 0.5, 1.0)
    # Per-pair training-set sizes D_i in examples, e.g. (("en-de", 200_000), ("en-zh", 5_000))
    # (Chen et al. 2023's data-constrained setting): a capped pair's training stream is its first
    # D_i examples, repeated; exported as `data_size`, which the DPL law (Chen eq. 6) needs.
    data_caps: tuple[tuple[str, int], ...] = ()
    seeds: tuple[int, ...] = (0,)
    vocab_size: int = 1024  # mnmt.data RECOMMENDED_VOCAB_SIZE["tiny"]: no cpu-tiny target is trimmed at 32
    # Seed of the sample of sentences the synthetic family's vocabulary is trained on (another
    # seed, another vocabulary of the same size): how much the results owe to one vocabulary.
    vocab_seed: int = 0
    # Sizes (non-embedding parameters) at which the report predicts beyond the trained grid.
    report_target_sizes: tuple[float, ...] = (2e6, 8e6)
    # Training options of every run beyond those above: (TrainConfig path, value) pairs, e.g.
    # (("label_smoothing", 0.1), ("decode.beam_size", 8)). A study file or --gin fills it from
    # TrainConfig.F / DecodeConfig.F / OptimizerConfig.F / … bindings (mnmt.study.train_options;
    # docs/reference/configuration.md, "Training options in a study").
    train_overrides: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        validate(self)

    @property
    def lengths(self) -> dict[str, int]:
        return dict(self.feature_lengths)

    def steps_for(self, size: str) -> int:
        """Training steps of the runs of model size `size`."""
        return dict(self.train_steps_by_size).get(size, self.train_steps)

    def cooldown_for(self, size: str) -> int:
        """Cool-down steps (decay of the rate to 0) at the end of the runs of `size`."""
        return int(round(self.cooldown_fraction * self.steps_for(size)))

    def branch_steps_for(self, size: str) -> list[int]:
        """The branch points of the runs of `size` as steps (`cooldown_branches`)."""
        return branches.resolve_branch_steps(
            self.cooldown_branches, self.steps_for(size), self.cooldown_for(size),
            self.branch_cooldown_fraction or None, BRANCH_FIELDS, decay=self.decay)

    def run_steps(self, run: RunSpec) -> tuple[int, int]:
        """(first, last) step a run trains: (0, T) for a run ((0, S) when it stops early at S,
        `stop_step_for`), (b, b + c_b) for a branch."""
        if run.parent:
            return run.branch_step, run.branch_step + run.cooldown_steps
        return 0, self.stop_step_for(run)

    def stop_step_for(self, run: RunSpec) -> int:
        """The step `run` trains to: ⌈stop_fraction · T⌉ for a stopped run
        (`expansion.stopped_runs`), else its steps T (a branch: its budget)."""
        if run.parent:
            return run.branch_step + run.cooldown_steps
        steps = self.steps_for(run.size)
        if self.stop_fraction >= 1.0 or run.run_id not in stopped_runs(self):
            return steps
        return min(steps, math.ceil(self.stop_fraction * steps - 1e-9))


def simplex_grid(num_pairs: int, resolution: int) -> list[tuple[float, ...]]:
    """All weight vectors on the K-simplex with coordinates in multiples of 1/resolution."""
    if num_pairs < 1 or resolution < 1:
        raise StudyError(f"simplex_grid: expected num_pairs >= 1 and resolution >= 1, got {num_pairs}, {resolution}")
    points = []
    for combo in itertools.product(range(resolution + 1), repeat=num_pairs - 1):
        if sum(combo) <= resolution:
            last = resolution - sum(combo)
            points.append(tuple(c / resolution for c in (*combo, last)))
    return points


# Built-in presets (Python values); the main job, preset `default`, is defined once, as the shipped
# study file t5x_configs/studies/cpu_default.gin (`mnmt.study.loading.preset`), like every other
# shipped study.
PRESETS: dict[str, StudySpec] = {
    # A miniature of the main job for the integration test and CI (at most ~2 minutes).
    "ci": StudySpec(
        name="cpu-ci",
        sizes=("micro-1", "micro-2", "micro-3", "mini-1"),
        weights=(0.5,),
        train_steps=300,
        batch_size=32,
        eval_every=100,
        checkpoint_every=100,
        warmup_steps=50,
        decode_at_end=True,
        num_decode_examples=16,
        report_target_sizes=(2e6,),
    ),
}

# One line per built-in preset for `mnmt-study presets` (study files say it in their first comment).
PRESET_SUMMARIES: dict[str, str] = {
    "ci": "A two-minute miniature of the main job for the integration test and CI.",
}
