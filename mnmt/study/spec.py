"""Studies: a grid of model sizes x mixture weights x seeds, expanded into runs.

A study follows Fernandes et al. 2023 §3: every language pair is trained in mixtures whose
sampling weights vary over a grid (two pairs: p for the first pair and 1 - p for the second;
K pairs: points of a simplex grid), every model size of a zoo is trained on every mixture, and
every run is evaluated on every pair (p = 0 still means "evaluated, not trained").

`StudySpec` is gin-configurable, so a study is a gin file in `t5x_configs/studies/`; the built-in
CPU presets are plain Python values in `PRESETS`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import gin

from mnmt.models.configs import (  # light: no jax
    ACTIVATION_DTYPES,
    PARTITIONING_RULES,
    REMAT_POLICIES,
)
from mnmt.study import mixture_design, train_options  # light: numpy, configuration only
from mnmt.training import branches  # light: configuration only
from mnmt.training.config import COOLDOWN_SHAPES, DECAYS  # light: no jax

# What branch errors call the study's fields (mnmt.training.branches names TrainConfig's).
_BRANCH_FIELDS = branches.BranchFields("StudySpec.cooldown_branches",
                                       "StudySpec.branch_cooldown_fraction",
                                       "StudySpec.cooldown_fraction", "StudySpec.decay")

# Fernandes et al. 2023 §3.2: weights of the first pair in two-pair mixtures.
FERNANDES_TWO_PAIR_GRID: tuple[float, ...] = (0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1.0)


class StudyError(ValueError):
    """A study definition that cannot be run; the message names the field and what was expected."""


@gin.configurable("StudySpec")
@dataclasses.dataclass(frozen=True)
class StudySpec:
    """Everything that defines a study. Sizes and weights span the grid; the rest is shared.

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
    # Token caches of the real-data tasks' finite training splits (mnmt.data.cache): the data
    # stage builds them (Apache Beam; skipped when up to date) and every run reads them by index.
    # cache_dir: where ("" = OUT/data/cache; a shared directory serves several studies);
    # cache_shards: shards per task (0 = at least 16, a multiple of the build's cores; must be a
    # multiple of the hosts that read it); cache_beam_args: Beam options of the build (empty = the
    # local runner over all cores; e.g. ("--runner=DataflowRunner", "--project=P", …)).
    # cache_data=False holds every training split in memory instead (small corpora only).
    cache_data: bool = True
    cache_dir: str = ""
    cache_shards: int = 0
    cache_beam_args: tuple[str, ...] = ()
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
    # Further mixtures whose weights follow from data_caps (which must then name every pair):
    # temperature sampling p_i ∝ D_i^(1/T), one mixture per T (Chen et al. 2023 §4.2; inf =
    # uniform), and Caillaut et al. 2024 §3.1 oversampling, one mixture per parameter t.
    temperatures: tuple[float, ...] = ()
    oversampling: tuple[float, ...] = ()
    # K-pair designs (mnmt.study.mixture_design), each mixture trained at every size and seed:
    # one run per pair with all weight on it (tag only-<pair>) and the uniform mixture (uniform).
    single_pair_runs: bool = False
    uniform_mixture: bool = False
    # UniMax (Chung et al. 2023): uniform, but no pair repeated more than E epochs of its
    # data_caps entry (needed for every pair); one mixture per E (tag unimax<E>). The budget is
    # one run's training examples: train_steps × packed rows per step (batch_size, or
    # batch_tokens // targets length) × examples per packed row.
    unimax_epochs: tuple[float, ...] = ()
    # Examples per packed row of that budget; 0 = estimate: registered tasks 1 (a lower bound),
    # the synthetic family its own examples packed like the pipeline packs them, one token per
    # word (an upper bound: rarer words take several pieces).
    examples_per_row: float = 0.0
    # Epoch cap of the K-pair analysis (3 pairs or more, data_caps for every pair): the report's
    # recommended weights repeat no pair's data more often within the budget above, and losses of
    # pairs repeated more often (where a small dataset over-fits) are outside the mixture laws'
    # domain. 0 = the largest of unimax_epochs (none: no cap).
    epoch_cap: float = 0.0
    # M mixtures from a symmetric Dirichlet(dirichlet_concentration) seeded by design_seed (tags
    # dir0 … dir<M-1>), the points a K-pair law is fitted on; heldout_mixtures more from another
    # seed stream (tags hold0 …), trained at every size and seed, never fitted (RunSpec.heldout).
    dirichlet_mixtures: int = 0
    dirichlet_concentration: float = 1.0
    design_seed: int = 0
    heldout_mixtures: int = 0
    # Importance of each pair in the K-pair recommendation's objective (the preference-weighted
    # mean loss), as (pair, weight) entries, e.g. (("en-da", 3.0),); pairs not named weigh 1.
    mixture_preferences: tuple = ()
    seeds: tuple[int, ...] = (0,)
    train_steps: int = 700
    # Per-size step counts that replace `train_steps` (Fernandes et al. §3: 500K steps below
    # 500M parameters, 1M above), e.g. (("fernandes-6", 1_000_000),).
    train_steps_by_size: tuple[tuple[str, int], ...] = ()
    batch_size: int = 48  # packed rows per step
    # If > 0, the batch in tokens instead (Fernandes: 500K): rows = batch_tokens // targets length.
    batch_tokens: int = 0
    feature_lengths: tuple[tuple[str, int], ...] = (("inputs", 32), ("targets", 32))
    eval_every: int = 100
    checkpoint_every: int = 200
    # The rate after the warm-up: "rsqrt" (learning_rate · rsqrt(step), as Fernandes et al.),
    # "constant" (learning_rate until the cool-down; a converged run's curve is then flat) or
    # "cosine" (learning_rate down to TrainConfig.final_lr_fraction of it at the last step; no
    # cooldown_branches). TrainConfig.decay.
    decay: str = "rsqrt"
    learning_rate: float = 1.0
    # Adafactor momentum (first-moment decay; 0 = none, T5X's default). OptimizerConfig.momentum.
    momentum: float = 0.0
    warmup_steps: int = 100
    # Share of each run's steps over which the rate decays linearly to 0 at the end (0 = plain
    # rsqrt, as Fernandes et al.); removes the rsqrt schedule's noise floor in short CPU runs.
    cooldown_fraction: float = 0.0
    # Shape of the cool-down factor: "linear" (1 − x) or "1-sqrt" (1 − √x, Hägele et al. 2024),
    # x the share of the cool-down done.
    cooldown_shape: str = "linear"
    # Cool-down branches (Hägele et al. 2024; mnmt.training.branches): points of every run —
    # fractions of its steps (e.g. (0.25, 0.5)) or steps — where a branch leaves it and cools
    # down, so each run also gives the cooled-down loss at D_b = b + c_b. The regime verdict and
    # the L(N, D) fit read these budgets. Each branch trains its c_b cool-down steps only.
    cooldown_branches: tuple = ()
    # Share of each branch's steps its cool-down takes (0 = cooldown_fraction: a branch is then
    # exactly the run trained for D_b steps).
    branch_cooldown_fraction: float = 0.0
    dropout_rate: float = 0.0
    # Activation/matmul dtype of every run (TrainConfig.activation_dtype): "float32", or
    # "bfloat16" (mixed precision; parameters, optimizer state and loss stay float32).
    activation_dtype: str = "float32"
    # Rematerialisation of each layer in the backward pass (TrainConfig.remat_policy): "none",
    # "full", "minimal" or "dots_saveable"; less memory for more compute, same gradients.
    remat_policy: str = "none"
    # Micro-batches per step of every run (TrainConfig.gradient_accumulation_steps): their
    # gradients are summed, so less memory, same gradient; `mnmt-study plan --mesh` recommends one.
    gradient_accumulation_steps: int = 1
    # Output projection + loss in this many sequence slices (TrainConfig.loss_tiles): the
    # vocabulary-sized logits exist one slice at a time; 1 = untiled.
    loss_tiles: int = 1
    # Logical-axis rule set of every run (TrainConfig.partitioning_rules): "standard" (parameters
    # replicated over the data axis) or "fsdp" (parameters and optimizer slots split over it).
    partitioning_rules: str = "standard"
    vocab_size: int = 1024  # mnmt.data RECOMMENDED_VOCAB_SIZE["tiny"]: no cpu-tiny target is trimmed at 32
    # Seed of the sample of sentences the synthetic family's vocabulary is trained on (another
    # seed, another vocabulary of the same size): how much the results owe to one vocabulary.
    vocab_seed: int = 0
    decode_at_end: bool = True
    num_decode_examples: int = 64
    eval_sets: tuple[str, ...] = ("validation",)
    # Sizes (non-embedding parameters) at which the report predicts beyond the trained grid.
    report_target_sizes: tuple[float, ...] = (2e6, 8e6)
    # Runs trained but never fitted, as (size, weights) with weights as one entry of `weights`
    # (e.g. (("mini-3", 0.3),)): the report predicts their loss from the laws fitted on the grid
    # and shows predicted against measured (seeds: the first of `seeds`).
    heldout: tuple = ()
    # Grid runs repeated with another seed, as (size, weight, seed) entries (e.g.
    # (("mini-2", 0.5, 1),)): fitted like the grid (the report averages seeds); they measure the
    # seed noise that the leave-largest-size-out backtest is judged against (Ghorbani App. C).
    seed_repeats: tuple = ()
    # Runs of one size (and step count) trained together as one vmapped program on this host
    # (`mnmt.training.trainer.train_group`); 1 trains them one at a time. Bounded by memory:
    # a group holds this many copies of the parameters and optimizer state.
    max_group: int = 8
    # Verification (mnmt.study.verify): after the report, train its recommended K-pair weights
    # and the study's baselines at verify_size ("" = the largest of sizes) with verify_seeds
    # seeds (>= 2), and report measured against predicted; `mnmt-study verify OUT` on demand.
    verify: bool = False
    verify_size: str = ""
    verify_seeds: int = 2
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
            self.branch_cooldown_fraction or None, _BRANCH_FIELDS, decay=self.decay)

    def run_steps(self, run: RunSpec) -> tuple[int, int]:
        """(first, last) step a run trains: (0, T) for a run, (b, b + c_b) for a branch."""
        if run.parent:
            return run.branch_step, run.branch_step + run.cooldown_steps
        return 0, self.steps_for(run.size)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run of a study."""

    run_id: str
    size: str
    weights: dict[str, float]  # pair -> sampling weight (sums to 1)
    seed: int
    heldout: bool = False  # trained, never fitted: the report predicts it (StudySpec.heldout)
    # How the weights were chosen: "" (explicit), "T5" (temperature), "os5", or a design's tag
    # ("only-en-de", "uniform", "unimax1", "dir0", "hold0"; mnmt.study.mixture_design).
    mixture: str = ""
    # A cool-down branch: its parent's run id, the step it leaves from and its cool-down steps.
    parent: str = ""
    branch_step: int = 0
    cooldown_steps: int = 0

    @property
    def trained_pairs(self) -> list[str]:
        return [pair for pair, w in self.weights.items() if w > 0]


# Field -> what its value must look like (checked before the values themselves; a gin list is
# accepted where a tuple is expected). "pairs_of:K" = a sequence of (str, K) entries.
_FIELD_KINDS: dict[str, str] = {
    "name": "str", "data_preset": "str", "task_module": "str", "vocabulary_path": "str",
    "decay": "str", "cooldown_shape": "str", "cooldown_branches": "numbers",
    "branch_cooldown_fraction": "number", "activation_dtype": "str", "remat_policy": "str",
    "partitioning_rules": "str", "tasks": "pairs_of:str", "pairs": "strs", "sizes": "strs",
    "eval_sets": "strs", "weights": "seq", "data_caps": "seq", "heldout": "seq",
    "temperatures": "numbers", "oversampling": "numbers", "report_target_sizes": "numbers",
    "seeds": "ints", "train_steps_by_size": "pairs_of:int", "feature_lengths": "pairs_of:int",
    "train_steps": "int", "batch_size": "int", "batch_tokens": "int", "eval_every": "int",
    "checkpoint_every": "int", "warmup_steps": "int", "vocab_size": "int",
    "num_decode_examples": "int", "max_group": "int", "learning_rate": "number",
    "momentum": "number", "cooldown_fraction": "number", "dropout_rate": "number",
    "decode_at_end": "bool", "cache_data": "bool", "cache_dir": "str", "cache_shards": "int",
    "cache_beam_args": "strs", "single_pair_runs": "bool", "uniform_mixture": "bool",
    "unimax_epochs": "numbers", "examples_per_row": "number", "epoch_cap": "number", "dirichlet_mixtures": "int",
    "dirichlet_concentration": "number", "design_seed": "int", "heldout_mixtures": "int",
    "mixture_preferences": "seq",
    "gradient_accumulation_steps": "int", "loss_tiles": "int", "verify": "bool",
    "verify_size": "str", "verify_seeds": "int", "vocab_seed": "int", "seed_repeats": "seq",
}
_KIND_TEXT = {
    "str": "a string", "strs": "a tuple of strings", "seq": "a tuple", "numbers":
    "a tuple of numbers", "ints": "a tuple of integers", "int": "an integer", "number": "a number",
    "bool": "True or False", "pairs_of:str": "a tuple of (str, str) pairs",
    "pairs_of:int": "a tuple of (str, int) pairs",
}


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _has_kind(value: object, kind: str) -> bool:
    is_seq = isinstance(value, tuple | list)
    if kind.startswith("pairs_of:"):
        inner = {"str": lambda x: isinstance(x, str), "int": _is_int}[kind.split(":")[1]]
        return is_seq and all(isinstance(e, tuple | list) and len(e) == 2
                              and isinstance(e[0], str) and inner(e[1]) for e in value)
    element = {"strs": lambda x: isinstance(x, str), "numbers": _is_number, "ints": _is_int,
               "seq": lambda x: True}.get(kind)
    if element is not None:
        return is_seq and all(element(e) for e in value)
    return {"str": lambda x: isinstance(x, str), "int": _is_int, "number": _is_number,
            "bool": lambda x: isinstance(x, bool)}[kind](value)


def _validate_kinds(spec: StudySpec) -> None:
    for field, kind in _FIELD_KINDS.items():
        value = getattr(spec, field)
        if not _has_kind(value, kind):
            raise StudyError(f"StudySpec.{field}: expected {_KIND_TEXT[kind]}, got {value!r}")
    for field in ("learning_rate", "report_target_sizes"):
        values = getattr(spec, field)
        for value in values if isinstance(values, tuple | list) else [values]:
            if not (math.isfinite(value) and value > 0):
                raise StudyError(f"StudySpec.{field}: expected finite positive numbers, got "
                                 f"{value!r}")
    if not 0.0 <= spec.dropout_rate < 1.0:
        raise StudyError(f"StudySpec.dropout_rate: expected a rate in [0, 1), got "
                         f"{spec.dropout_rate!r}")
    for field in ("warmup_steps", "num_decode_examples", "cache_shards"):
        if getattr(spec, field) < 0:
            raise StudyError(f"StudySpec.{field}: expected a non-negative integer, got "
                             f"{getattr(spec, field)!r}")
    if not spec.eval_sets or not all(spec.eval_sets):
        raise StudyError(f"StudySpec.eval_sets: expected non-empty names, got {spec.eval_sets!r}")


def validate(spec: StudySpec) -> None:
    """Raise StudyError naming the first field of `spec` that cannot be run."""
    _validate_kinds(spec)
    if not spec.name or any(c in spec.name for c in "/\\ "):
        raise StudyError(f"StudySpec.name: expected a non-empty name without '/', '\\' or spaces, got {spec.name!r}")
    if len(spec.pairs) < 1 or len(set(spec.pairs)) != len(spec.pairs):
        raise StudyError(f"StudySpec.pairs: expected distinct language pairs, got {spec.pairs!r}")
    for pair in spec.pairs:
        parts = pair.split("-")
        if len(parts) != 2 or not all(parts):
            raise StudyError(f"StudySpec.pairs: expected pairs like 'en-de', got {pair!r}")
    if not spec.sizes:
        raise StudyError("StudySpec.sizes: expected at least one model size")
    if not spec.weights and not any(getattr(spec, f) for f in _DESIGN_FIELDS):
        raise StudyError("StudySpec.weights: expected at least one mixture (or a design: "
                         + ", ".join(_DESIGN_FIELDS) + ")")
    _validate_caps(spec)
    if (problem := mixture_design.design_error(spec)) is not None:
        raise StudyError(problem)
    for w in spec.weights:
        mixture_weights(spec.pairs, w)
    if not spec.seeds:
        raise StudyError("StudySpec.seeds: expected at least one seed")
    if spec.verify_seeds < 2:
        raise StudyError(f"StudySpec.verify_seeds: expected at least 2 (the verification verdict "
                         f"needs a seed sd), got {spec.verify_seeds!r}")
    if spec.verify and len(spec.pairs) < 3:
        raise StudyError(f"StudySpec.verify: verifies a K-pair recommendation (3 pairs or more), "
                         f"got pairs {list(spec.pairs)}")
    for field in ("train_steps", "batch_size", "eval_every", "checkpoint_every", "vocab_size",
                  "max_group"):
        value = getattr(spec, field)
        if not isinstance(value, int) or value <= 0:
            raise StudyError(f"StudySpec.{field}: expected a positive integer, got {value!r}")
    heldout_sizes = []
    for entry in spec.heldout:
        if not isinstance(entry, tuple | list) or len(entry) != 2 or not isinstance(entry[0], str):
            raise StudyError(f"StudySpec.heldout: expected (size, weights) entries, got {entry!r}")
        mixture_weights(spec.pairs, entry[1], field="heldout")
        heldout_sizes.append(entry[0])
    for entry in spec.seed_repeats:
        if (not isinstance(entry, tuple | list) or len(entry) != 3 or entry[0] not in spec.sizes
                or isinstance(entry[2], bool) or not isinstance(entry[2], int)
                or entry[2] in spec.seeds):
            raise StudyError(f"StudySpec.seed_repeats: expected (size, weight, seed) entries with "
                             f"a size of StudySpec.sizes {list(spec.sizes)} and a seed not in "
                             f"StudySpec.seeds {list(spec.seeds)}, got {entry!r}")
        mixture_weights(spec.pairs, entry[1], field="seed_repeats")
    for size, steps in spec.train_steps_by_size:
        if size not in spec.sizes and size not in heldout_sizes:
            raise StudyError(f"StudySpec.train_steps_by_size: size {size!r} is not in StudySpec.sizes "
                             f"{list(spec.sizes)} or StudySpec.heldout")
        if not isinstance(steps, int) or steps <= 0:
            raise StudyError(f"StudySpec.train_steps_by_size: expected a positive integer for {size!r}, "
                             f"got {steps!r}")
    for field, allowed in (("activation_dtype", ACTIVATION_DTYPES), ("remat_policy", REMAT_POLICIES),
                           ("partitioning_rules", PARTITIONING_RULES)):
        if getattr(spec, field) not in allowed:
            raise StudyError(f"StudySpec.{field}: expected one of {', '.join(allowed)}, got "
                             f"{getattr(spec, field)!r}")
    for field in ("gradient_accumulation_steps", "loss_tiles"):
        if getattr(spec, field) < 1:
            raise StudyError(f"StudySpec.{field}: expected a positive integer (1 = off), got "
                             f"{getattr(spec, field)!r}")
    if spec.decay not in DECAYS:
        raise StudyError(f"StudySpec.decay: expected one of {', '.join(DECAYS)}, got {spec.decay!r}")
    if not isinstance(spec.momentum, int | float) or not 0.0 <= float(spec.momentum) < 1.0:
        raise StudyError(f"StudySpec.momentum: expected a decay in [0, 1) (0 = no momentum), got "
                         f"{spec.momentum!r}")
    if not 0.0 <= float(spec.cooldown_fraction) <= 1.0:
        raise StudyError(f"StudySpec.cooldown_fraction: expected a share in [0, 1], got "
                         f"{spec.cooldown_fraction!r}")
    _validate_branches(spec)
    problem = train_options.overrides_error(spec.train_overrides,
                                            [f.name for f in dataclasses.fields(StudySpec)])
    if problem is not None:
        raise StudyError(problem)
    if not isinstance(spec.batch_tokens, int) or spec.batch_tokens < 0:
        raise StudyError(f"StudySpec.batch_tokens: expected 0 (use batch_size) or a positive integer, "
                         f"got {spec.batch_tokens!r}")
    if spec.tasks:
        named = [pair for pair, _ in spec.tasks]
        if sorted(named) != sorted(spec.pairs):
            raise StudyError(f"StudySpec.tasks: expected one task per pair {list(spec.pairs)}, got pairs {named}")
        if not spec.vocabulary_path:
            raise StudyError("StudySpec.vocabulary_path: required when StudySpec.tasks names registered tasks")
    lengths = dict(spec.feature_lengths)
    if set(lengths) != {"inputs", "targets"} or any(v <= 0 for v in lengths.values()):
        raise StudyError(
            f"StudySpec.feature_lengths: expected positive 'inputs' and 'targets' lengths, got {lengths!r}"
        )


# Fields that add mixtures besides `weights` (mnmt.study.mixture_design).
_DESIGN_FIELDS = ("temperatures", "oversampling", "single_pair_runs", "uniform_mixture",
                  "unimax_epochs", "dirichlet_mixtures", "heldout_mixtures")


def _validate_branches(spec: StudySpec) -> None:
    if spec.cooldown_shape not in COOLDOWN_SHAPES:
        raise StudyError(f"StudySpec.cooldown_shape: expected one of {', '.join(COOLDOWN_SHAPES)},"
                         f" got {spec.cooldown_shape!r}")
    if not 0.0 <= float(spec.branch_cooldown_fraction) < 1.0:
        raise StudyError(f"StudySpec.branch_cooldown_fraction: expected a share in [0, 1) (0: "
                         f"cooldown_fraction), got {spec.branch_cooldown_fraction!r}")
    sizes = list(spec.sizes) + [entry[0] for entry in spec.heldout]
    for size in dict.fromkeys(sizes):
        try:
            spec.branch_steps_for(size)
        except branches.BranchError as err:
            raise StudyError(f"{err} (size {size}, {spec.steps_for(size)} steps)") from None


def _validate_caps(spec: StudySpec) -> None:
    caps = {}
    for entry in spec.data_caps:
        if not isinstance(entry, tuple | list) or len(entry) != 2 or entry[0] not in spec.pairs:
            raise StudyError(f"StudySpec.data_caps: expected (pair, examples) entries with a pair of "
                             f"{list(spec.pairs)}, got {entry!r}")
        if not isinstance(entry[1], int) or isinstance(entry[1], bool) or entry[1] < 1:
            raise StudyError(f"StudySpec.data_caps: expected a positive integer number of examples "
                             f"for {entry[0]!r}, got {entry[1]!r}")
        caps[entry[0]] = entry[1]
    for field, values in (("temperatures", spec.temperatures), ("oversampling", spec.oversampling)):
        if not values:
            continue
        if set(caps) != set(spec.pairs):
            raise StudyError(f"StudySpec.{field}: weights from data sizes need StudySpec.data_caps "
                             f"for every pair {list(spec.pairs)}; caps given for {sorted(caps)}")
        for value in values:
            if not isinstance(value, int | float) or not value > 0:
                raise StudyError(f"StudySpec.{field}: expected positive numbers, got {value!r}")


def size_weights(spec: StudySpec) -> list[tuple[str, dict[str, float]]]:
    """The mixtures of `spec.temperatures` and `spec.oversampling`: (tag, pair -> weight), the
    weights computed from `spec.data_caps` (Chen et al. 2023 §4.2; Caillaut et al. 2024 §3.1)."""
    from fitting.data.sampling import oversampling_weights, temperature_weights  # numpy only

    caps = dict(spec.data_caps)
    sizes = [float(caps[pair]) for pair in spec.pairs] if spec.temperatures or spec.oversampling \
        else []
    out = []
    for T in spec.temperatures:
        w = temperature_weights(sizes, float(T))
        out.append((f"T{float(T):g}", dict(zip(spec.pairs, map(float, w), strict=True))))
    for t in spec.oversampling:
        w = oversampling_weights(sizes, float(t))
        out.append((f"os{float(t):g}", dict(zip(spec.pairs, map(float, w), strict=True))))
    return out


def mixture_weights(pairs: Sequence[str], w: float | Sequence[float],
                    field: str = "weights") -> dict[str, float]:
    """The per-pair sampling weights of one grid point (see `StudySpec.weights`); errors name
    `StudySpec.<field>`."""
    if _is_number(w):
        if len(pairs) != 2:
            raise StudyError(
                f"StudySpec.{field}: a single number p needs exactly two pairs, got {len(pairs)} pairs; "
                "give one weight per pair instead"
            )
        p = float(w)
        if not (0.0 <= p <= 1.0) or math.isnan(p):
            raise StudyError(f"StudySpec.{field}: expected p in [0, 1], got {w!r}")
        return {pairs[0]: p, pairs[1]: 1.0 - p}
    if not isinstance(w, tuple | list) or not all(_is_number(x) for x in w):
        raise StudyError(f"StudySpec.{field}: expected a number p or one number per pair "
                         f"{list(pairs)}, got {w!r}")
    values = [float(x) for x in w]
    if len(values) != len(pairs):
        raise StudyError(
            f"StudySpec.{field}: expected {len(pairs)} weights (one per pair {list(pairs)}), got {list(w)!r}"
        )
    if not all(math.isfinite(x) and x >= 0 for x in values) or not 0 < sum(values) < math.inf:
        raise StudyError(f"StudySpec.{field}: expected finite non-negative weights with a positive "
                         f"sum, got {list(w)!r}")
    total = sum(values)
    return {pair: x / total for pair, x in zip(pairs, values, strict=True)}


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


def run_id(size: str, weights: dict[str, float], seed: int, mixture: str = "") -> str:
    """Stable, readable run id: `mini-2_p0.50_s0` for two pairs, `mini-2_w0.20-0.30-0.50_s0` for
    K, `mini-2_T5_s0` / `mini-2_dir3_s0` for a mixture named by how its weights were chosen."""
    values = list(weights.values())
    if mixture:
        tag = mixture
    elif len(values) == 2:
        tag = f"p{values[0]:.2f}"
    else:
        tag = "w" + "-".join(f"{v:.2f}" for v in values)
    return f"{size}_{tag}_s{seed}"


def mixture_count(spec: StudySpec) -> int:
    """Mixtures trained at every size and seed and fitted: explicit weights, size-based and
    design ones (held-out mixtures not included), as `expand` builds them."""
    return len(spec.weights) + len(mixture_design.fitted_mixtures(spec, size_weights))


def expand(spec: StudySpec) -> list[RunSpec]:
    """The study's runs, smallest size first within each mixture (cheap results arrive early)."""
    runs = []
    for w, seed, size in itertools.product(spec.weights, spec.seeds, spec.sizes):
        weights = mixture_weights(spec.pairs, w)
        runs.append(RunSpec(run_id=run_id(size, weights, seed), size=size, weights=weights, seed=seed))
    for held, mixtures in ((False, mixture_design.fitted_mixtures(spec, size_weights)),
                           (True, mixture_design.heldout_design(spec))):
        for (tag, weights), seed, size in itertools.product(mixtures, spec.seeds, spec.sizes):
            runs.append(RunSpec(run_id=run_id(size, weights, seed, tag), size=size,
                                weights=weights, seed=seed, heldout=held, mixture=tag))
    for size, w in spec.heldout:
        weights = mixture_weights(spec.pairs, w)
        runs.append(RunSpec(run_id=run_id(size, weights, spec.seeds[0]), size=size,
                            weights=weights, seed=spec.seeds[0], heldout=True))
    for size, w, seed in spec.seed_repeats:
        weights = mixture_weights(spec.pairs, w)
        runs.append(RunSpec(run_id=run_id(size, weights, seed), size=size, weights=weights,
                            seed=seed))
    ids = [r.run_id for r in runs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise StudyError(f"StudySpec.weights/sizes/seeds/heldout/seed_repeats: the grid repeats runs "
                         f"{duplicates}")
    return runs


def branch_runs(spec: StudySpec, run: RunSpec) -> list[RunSpec]:
    """The cool-down branches of `run` (`StudySpec.cooldown_branches`), by step."""
    if run.parent:
        return []
    share = branches.resolve_cooldown_share(spec.steps_for(run.size), spec.cooldown_for(run.size),
                                            spec.branch_cooldown_fraction or None,
                                            _BRANCH_FIELDS) if spec.cooldown_branches else 0.0
    return [dataclasses.replace(run, run_id=branches.branch_run_id(run.run_id, step),
                                parent=run.run_id, branch_step=step,
                                cooldown_steps=branches.cooldown_steps_at(step, share))
            for step in spec.branch_steps_for(run.size)]


def with_branches(spec: StudySpec, runs: list[RunSpec]) -> list[RunSpec]:
    """`runs`, each followed by its cool-down branches."""
    return [r for run in runs for r in (run, *branch_runs(spec, run))]


def branch_groups(spec: StudySpec, group: list[RunSpec]) -> list[list[RunSpec]]:
    """The branches of a group of runs, one group per branch step (trained after the group)."""
    by_step: dict[int, list[RunSpec]] = {}
    for run in group:
        for branch in branch_runs(spec, run):
            by_step.setdefault(branch.branch_step, []).append(branch)
    return [by_step[step] for step in sorted(by_step)]


def progress_entries(spec: StudySpec, runs: list[RunSpec]) -> list[tuple[str, str, int, int]]:
    """(run id, size, steps trained, first step) of `runs` and their branches, for
    `mnmt.study.progress.StudyProgress`."""
    out = []
    for run in with_branches(spec, runs):
        first, last = spec.run_steps(run)
        out.append((run.run_id, run.size, last - first, first))
    return out


def training_groups(spec: StudySpec, groups: list[list[RunSpec]]) -> list[list[str]]:
    """The run ids trained together, in order: each group, then its branch groups."""
    return [[r.run_id for r in g] for group in groups
            for g in (group, *branch_groups(spec, group))]


def group_runs(spec: StudySpec, runs: list[RunSpec]) -> list[list[RunSpec]]:
    """Runs that train together (`StudySpec.max_group`): same size and steps, grid order."""
    by_size: dict[tuple[str, int], list[RunSpec]] = {}
    for run in runs:
        by_size.setdefault((run.size, spec.steps_for(run.size)), []).append(run)
    step = max(1, spec.max_group)
    return [members[i:i + step] for members in by_size.values()
            for i in range(0, len(members), step)]


PRESETS: dict[str, StudySpec] = {
    # The main job (SPEC §6): 5 sizes x 5 weights on the 2-pair synthetic family, plus one
    # held-out run at a larger size and an unseen weight; the rsqrt schedule with a cool-down
    # over the last 40 % of steps, and a cool-down branch at 25 % of each run (D = 417 steps
    # beside 1,000) for the regime verdict (docs/guides/studies.md: the built-in CPU study).
    "default": StudySpec(
        weights=(0.0, 0.3, 0.5, 0.7, 1.0),
        heldout=(("mini-3", 0.6),),
        # Fewer pieces than cpu-tiny's word types: both targets' rarer words are spelled in
        # pieces, which keeps both pairs capacity-bound across the micro sizes.
        vocab_size=704,
        feature_lengths=(("inputs", 36), ("targets", 36)),
        train_steps=1000,
        eval_every=200,
        checkpoint_every=500,
        cooldown_fraction=0.4,
        cooldown_branches=(0.25,),
    ),
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
    "default": "The main job: Fernandes et al. 2023 in miniature on cpu-tiny, en-de and en-zh "
               "(t5x_configs/studies/cpu_default.gin).",
    "ci": "A two-minute miniature of the main job for the integration test and CI.",
}
