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
import inspect
import itertools
import math
from typing import Any

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
    FIELD_SECTIONS,
    SECTIONS,
    Adaptive,
    Branches,
    Cache,
    Compute,
    EarlyStop,
    Evaluation,
    MixtureDesign,
    Schedule,
    Verification,
    field_value,
    flat_names,
)
from mnmt.training import branches  # light: configuration only

__all__ = [
    "FERNANDES_TWO_PAIR_GRID", "PRESETS", "PRESET_SUMMARIES", "RunSpec", "StudyError", "StudySpec",
    "branch_check_runs", "branch_groups", "branch_runs", "expand", "group_runs", "mixture_count", "mixture_weights",
    "progress_entries", "run_id", "simplex_grid", "size_weights", "stop_check_runs", "stop_savings",
    "stopped_runs", "training_groups", "validate", "with_branches", "field_names", "study_spec",
]

# Fernandes et al. 2023 §3.2: weights of the first pair in two-pair mixtures.
FERNANDES_TWO_PAIR_GRID: tuple[float, ...] = (0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1.0)


@dataclasses.dataclass(frozen=True)
class StudySpec:
    """Everything that defines a study: the grid's fields, then one section per topic (as
    `TrainConfig` has), each a frozen dataclass of `mnmt.study.spec_sections`.

    Every field keeps one flat name — its gin path (`StudySpec.train_steps = 2800`), its key in
    OUT/study.json and its name in `StudySpec.of(train_steps=2800)` and `spec.replace(…)` — and is
    read where it lives: `spec.sizes`, `spec.schedule.train_steps`, `spec.branches.branch_checks`.

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
    # Runs trained but never fitted, as (size, weights) with weights as one entry of `weights`
    # (e.g. (("mini-3", 0.3),)): the report predicts their loss from the laws fitted on the grid
    # and shows predicted against measured (seeds: `heldout_seeds`).
    heldout: tuple = ()
    # Seeds of each held-out run (>= 1): the first of `seeds` and, from 2 on, seed replicates
    # (the rest of `seeds`, then the integers after the largest), all held out. The report
    # judges the prediction against the seed-to-seed sd they measure
    # (fitting.report.sections.heldout); with one seed, against the study's seed noise
    # (seed_repeats) or the 2 % clause alone.
    heldout_seeds: int = 1
    # Grid runs repeated with another seed, as (size, weight, seed) entries (e.g.
    # (("mini-2", 0.5, 1),)): fitted like the grid (the report averages seeds); they measure the
    # seed noise that the leave-largest-size-out backtest is judged against (Ghorbani App. C).
    seed_repeats: tuple = ()
    # Sizes (non-embedding parameters) at which the report predicts beyond the trained grid.
    report_target_sizes: tuple[float, ...] = (2e6, 8e6)
    # Training options of every run beyond those above: (TrainConfig path, value) pairs, e.g.
    # (("label_smoothing", 0.1), ("decode.beam_size", 8)). A study file or --gin fills it from
    # TrainConfig.F / DecodeConfig.F / OptimizerConfig.F / … bindings (mnmt.study.train_options;
    # docs/reference/configuration.md, "Training options in a study").
    train_overrides: tuple[tuple[str, object], ...] = ()
    schedule: Schedule = Schedule()
    branches: Branches = Branches()
    early_stop: EarlyStop = EarlyStop()
    evaluation: Evaluation = Evaluation()
    design: MixtureDesign = MixtureDesign()
    cache: Cache = Cache()
    compute: Compute = Compute()
    verification: Verification = Verification()
    adaptive: Adaptive = Adaptive()

    def __post_init__(self) -> None:
        validate(self)

    @classmethod
    def of(cls, **fields: Any) -> StudySpec:
        """The study with these fields, by their flat names (`train_steps=2800`, as gin and
        study.json name them; a section's fields gathered into it), the rest as defaults."""
        own, parts = _split_fields(fields)
        return cls(**own, **{attr: SECTIONS[attr](**values) for attr, values in parts.items()})

    def replace(self, **fields: Any) -> StudySpec:
        """This study with these fields changed, by their flat names (`stop_fraction=0.6`)."""
        own, parts = _split_fields(fields)
        changed = {attr: dataclasses.replace(getattr(self, attr), **values)
                   for attr, values in parts.items()}
        return dataclasses.replace(self, **own, **changed)

    def flat_fields(self) -> dict[str, Any]:
        """Every field by its flat name (what OUT/study.json records; `StudySpec.of` inverts it)."""
        return {name: field_value(self, name) for name in field_names()}

    @property
    def lengths(self) -> dict[str, int]:
        return dict(self.schedule.feature_lengths)

    def steps_for(self, size: str) -> int:
        """Training steps of the runs of model size `size`."""
        return dict(self.schedule.train_steps_by_size).get(size, self.schedule.train_steps)

    def cooldown_for(self, size: str) -> int:
        """Cool-down steps (decay of the rate to 0) at the end of the runs of `size`."""
        return int(round(self.schedule.cooldown_fraction * self.steps_for(size)))

    def branch_steps_for(self, size: str) -> list[int]:
        """The branch points of the runs of `size` as steps (`cooldown_branches`)."""
        return branches.resolve_branch_steps(
            self.branches.cooldown_branches, self.steps_for(size), self.cooldown_for(size),
            self.branches.branch_cooldown_fraction or None, BRANCH_FIELDS,
            decay=self.schedule.decay)

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
        fraction = self.early_stop.stop_fraction
        if fraction >= 1.0 or run.run_id not in stopped_runs(self):
            return steps
        return min(steps, math.ceil(fraction * steps - 1e-9))


def field_names() -> list[str]:
    """Every field of a study by its flat name: the grid's, then each section's."""
    return flat_names(StudySpec)


def _split_fields(fields: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Flat fields -> (StudySpec's own, section attribute -> its fields); TypeError naming a
    field a study does not have."""
    own_names = {f.name for f in dataclasses.fields(StudySpec)}
    own: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    for name, value in fields.items():
        if name in FIELD_SECTIONS:
            parts.setdefault(FIELD_SECTIONS[name], {})[name] = value
        elif name in own_names:
            own[name] = value
        else:
            raise TypeError(f"StudySpec has no field {name!r}")
    return own, parts


def study_spec(**fields: Any) -> StudySpec:
    """`StudySpec.of`, registered as the gin configurable `StudySpec`: a study file binds every
    field by its flat name (`StudySpec.train_steps = 2800`)."""
    return StudySpec.of(**fields)


def _flat_signature() -> inspect.Signature:
    """study_spec's parameters: every flat field, keyword-only, with its default (gin reads them
    to accept or refuse a binding)."""
    defaults = StudySpec().flat_fields()
    return inspect.Signature([inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                                default=defaults[name])
                              for name in field_names()])


study_spec.__signature__ = _flat_signature()
study_spec = gin.configurable("StudySpec")(study_spec)


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
    "ci": StudySpec.of(
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
