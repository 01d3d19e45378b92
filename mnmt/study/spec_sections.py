"""The sections of a study definition: each a frozen dataclass of one topic whose fields are
described where they are declared.

`mnmt.study.spec.StudySpec` holds the grid's fields and one of each section (`SECTIONS`: its
attribute -> the section), as `TrainConfig` holds its sections: `spec.schedule.train_steps`.
Every field keeps one flat name — its gin path `StudySpec.FIELD`, its key in OUT/study.json —
that `FIELD_SECTIONS` maps to its section. A field that sets a `TrainConfig` setting under
another path names that path in its metadata (`TRAIN_PATH`), from which
`mnmt.study.train_options` derives its renames; the annotations are what
`mnmt.study.spec_checks` checks a value's kind against. Configuration only: no JAX, no imports
from the rest of the study package.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["FIELD_SECTIONS", "SECTIONS", "TRAIN_PATH", "Adaptive", "Branches", "Cache", "Compute", "EarlyStop",
           "Evaluation", "MixtureDesign", "Schedule", "Verification", "field_value", "flat_names",
           "train_paths"]

#: metadata key: the TrainConfig path a StudySpec field sets when the names differ
TRAIN_PATH = "train_config_path"


def _trains(path: str, default: object) -> dataclasses.Field:
    """A field with `default` that sets TrainConfig path `path` of every run."""
    return dataclasses.field(default=default, metadata={TRAIN_PATH: path})


@dataclasses.dataclass(frozen=True)
class Cache:
    """Token caches of the real-data tasks' finite training splits (mnmt.data.cache): the data
    stage builds them (Apache Beam; skipped when up to date) and every run reads them by index."""

    # False holds every training split in memory instead (small corpora only).
    cache_data: bool = True
    # Where the caches go ("" = OUT/data/cache; a shared directory serves several studies).
    cache_dir: str = ""
    # Shards per task (0 = at least 16, a multiple of the build's cores; must be a multiple of
    # the hosts that read it).
    cache_shards: int = 0
    # Beam options of the build (empty = the local runner over all cores; e.g.
    # ("--runner=DataflowRunner", "--project=P", …)).
    cache_beam_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MixtureDesign:
    """Mixtures besides `StudySpec.weights` (mnmt.study.mixture_design), each trained at every
    size and seed."""

    # Weights from StudySpec.data_caps (which must then name every pair): temperature sampling
    # p_i ∝ D_i^(1/T), one mixture per T (Chen et al. 2023 §4.2; inf = uniform) ...
    temperatures: tuple[float, ...] = ()
    # ... and Caillaut et al. 2024 §3.1 oversampling, one mixture per parameter t.
    oversampling: tuple[float, ...] = ()
    # K-pair designs: one run per pair with all weight on it (tag only-<pair>) ...
    single_pair_runs: bool = False
    # ... and the uniform mixture (tag uniform).
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
    # recommended weights repeat no pair's data more often within the budget above, and losses
    # of pairs repeated more often (where a small dataset over-fits) are outside the mixture
    # laws' domain. 0 = the largest of unimax_epochs (none: no cap).
    epoch_cap: float = 0.0
    # M mixtures from a symmetric Dirichlet(dirichlet_concentration) seeded by design_seed (tags
    # dir0 … dir<M-1>), the points a K-pair law is fitted on.
    dirichlet_mixtures: int = 0
    dirichlet_concentration: float = 1.0
    design_seed: int = 0
    # Mixtures more from another seed stream (tags hold0 …), trained at every size and seed,
    # never fitted (RunSpec.heldout).
    heldout_mixtures: int = 0
    # Importance of each pair in the K-pair recommendation's objective (the preference-weighted
    # mean loss), as (pair, weight) entries, e.g. (("en-da", 3.0),); pairs not named weigh 1.
    mixture_preferences: tuple = ()


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Steps, batch and learning rate of every run."""

    train_steps: int = 700
    # Per-size step counts that replace `train_steps` (Fernandes et al. §3: 500K steps below
    # 500M parameters, 1M above), e.g. (("fernandes-6", 1_000_000),).
    train_steps_by_size: tuple[tuple[str, int], ...] = ()
    # Packed rows per step.
    batch_size: int = _trains("inputs.batch_size", 48)
    # If > 0, the batch in tokens instead (Fernandes: 500K): rows = batch_tokens // targets length.
    batch_tokens: int = _trains("inputs.batch_tokens", 0)
    feature_lengths: tuple[tuple[str, int], ...] = _trains(
        "inputs.feature_lengths", (("inputs", 32), ("targets", 32)))
    # The rate after the warm-up: "rsqrt" (learning_rate · rsqrt(step), as Fernandes et al.),
    # "constant" (learning_rate until the cool-down; a converged run's curve is then flat) or
    # "cosine" (learning_rate down to TrainConfig.final_lr_fraction of it at the last step; no
    # cooldown_branches). TrainConfig.decay.
    decay: str = "rsqrt"
    learning_rate: float = 1.0
    # Adafactor momentum (first-moment decay; 0 = none, T5X's default). OptimizerConfig.momentum.
    momentum: float = _trains("optimizer.momentum", 0.0)
    warmup_steps: int = 100
    # Share of each run's steps over which the rate decays linearly to 0 at the end (0 = plain
    # rsqrt, as Fernandes et al.); removes the rsqrt schedule's noise floor in short CPU runs.
    cooldown_fraction: float = 0.0
    # Shape of the cool-down factor: "linear" (1 − x) or "1-sqrt" (1 − √x, Hägele et al. 2024),
    # x the share of the cool-down done.
    cooldown_shape: str = "linear"
    dropout_rate: float = 0.0


@dataclasses.dataclass(frozen=True)
class Branches:
    """Cool-down branches (Hägele et al. 2024; mnmt.training.branches)."""

    # Points of every run — fractions of its steps (e.g. (0.25, 0.5)) or steps — where a branch
    # leaves it and cools down, so each run also gives the cooled-down loss at D_b = b + c_b.
    # The regime verdict and the L(N, D) fit read these budgets. Each branch trains its c_b
    # cool-down steps only.
    cooldown_branches: tuple[float, ...] = _trains("branches.points", ())
    # Share of each branch's steps its cool-down takes (0 = cooldown_fraction: a branch is then
    # exactly the run trained for D_b steps).
    branch_cooldown_fraction: float = _trains("branches.cooldown_fraction", 0.0)
    # Fewer cool-down branches: True trains, of each size, only the middle branch (by step) of
    # one experiment with all its seeds — the size's seed-repeated experiment where it has one,
    # else its middle mixture (`expansion.branch_check_runs`) — as the check, and the report
    # takes every other planned budget of L(N, D) from the run's curve, marked predicted
    # (fitting.report.predicted_budgets). Held-out runs as `heldout_branches` says. False (the
    # default) trains every branch.
    branch_checks: bool = False
    # Whether held-out runs get cool-down branches too: the report judges a held-out run by its
    # final loss, so their branches only feed the curve section; False trains none (the default
    # study saves a fifth of its held-out runs' time).
    heldout_branches: bool = True


@dataclasses.dataclass(frozen=True)
class EarlyStop:
    """Runs stopped early whose cooled-down ends the report predicts
    (fitting.report.sections.early_stop)."""

    # Each design run that is not a check (below) stops at ⌈stop_fraction · its steps⌉ with the
    # schedule of all its steps, so it is a prefix of the full run (the same study with
    # stop_fraction=1 later resumes it to the end), and the report predicts its cooled-down end
    # from its curve with an interval. 1 = off. Held-out runs are never stopped; branches that
    # would leave a stopped run after its stop are not trained (their ends are predicted;
    # L(N, D) takes them, and the stopped run's end, marked predicted).
    stop_fraction: float = 1.0
    # The design runs still trained to the end, whose trained ends check the predictions: () =
    # one experiment per size with all its seeds (the size's seed-repeated experiment where it
    # has one, else its middle mixture); ("all",) = every design run (nothing saved: a benchmark
    # of the predictions); else run ids (`mnmt-study plan` lists them).
    stop_checks: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Evaluations, probes and decodes of every run."""

    eval_every: int = _trains("eval.period", 100)
    eval_sets: tuple[str, ...] = _trains("eval.sets", ("validation",))
    # Probe evaluations (EvalConfig.probe_every, probe_examples): every `probe_every` steps (0 =
    # off) each pair's loss on the same first `probe_examples` examples of its first eval set,
    # written as `probe_loss` rows, a curve per pair whose points differ by the model only; the
    # curve laws of the report fit it where present (docs/guides/training.md, "Probe curves").
    probe_every: int = _trains("eval.probe_every", 0)
    probe_examples: int = _trains("eval.probe_examples", 128)
    decode_at_end: bool = _trains("decode.at_end", True)
    num_decode_examples: int = _trains("decode.num_examples", 64)


@dataclasses.dataclass(frozen=True)
class Compute:
    """How every run uses its devices: precision, memory, grouping, checkpoints."""

    # Activation/matmul dtype (TrainConfig.activation_dtype): "float32", or "bfloat16" (mixed
    # precision; parameters, optimizer state and loss stay float32).
    activation_dtype: str = "float32"
    # Rematerialisation of each layer in the backward pass (TrainConfig.remat_policy): "none",
    # "full", "minimal" or "dots_saveable"; less memory for more compute, same gradients.
    remat_policy: str = "none"
    # Micro-batches per step (TrainConfig.gradient_accumulation_steps): their gradients are
    # summed, so less memory, same gradient; `mnmt-study plan --mesh` recommends one.
    gradient_accumulation_steps: int = 1
    # Output projection + loss in this many sequence slices (TrainConfig.loss_tiles): the
    # vocabulary-sized logits exist one slice at a time; 1 = untiled.
    loss_tiles: int = 1
    # Logical-axis rule set (TrainConfig.partitioning_rules): "standard" (parameters replicated
    # over the data axis) or "fsdp" (parameters and optimizer slots split over it).
    partitioning_rules: str = "standard"
    # Runs of one size (and step count) trained together as one vmapped program on this host
    # (`mnmt.training.trainer.train_group`); 1 trains them one at a time. Bounded by memory:
    # a group holds this many copies of the parameters and optimizer state.
    max_group: int = 8
    checkpoint_every: int = _trains("checkpoint.period", 200)


@dataclasses.dataclass(frozen=True)
class Verification:
    """After the report (mnmt.study.verify): train its recommended K-pair weights and the study's
    baselines at the size it recommends for (report_target_sizes[0]), and report measured
    against predicted; `mnmt-study verify OUT` on demand."""

    verify: bool = False
    # The size to verify at ("" = found among sizes/heldout).
    verify_size: str = ""
    # Seeds of every verified mixture (>= 2; the same for every mixture: compared paired by seed).
    verify_seeds: int = 3


@dataclasses.dataclass(frozen=True)
class Adaptive:
    """An adaptive study (mnmt.study.adaptive): instead of the whole grid, an initial design, then
    round by round the grid runs that most narrow the 95 % interval of the target (the target
    pair's fitted L∞, E, or the K-pair recommendation's objective) per FLOP, until that
    interval is narrow enough or the compute budget is spent. The seed repeats and the
    held-out runs are trained as in the full grid, outside the budget."""

    adaptive: bool = False
    # What the design makes certain: "E" (a pair's fitted L∞) or "objective" (the K-pair
    # recommendation's objective at the report's target size; 3 pairs or more;
    # mnmt.study.adaptive_objective).
    adaptive_target: str = "E"
    # The pair whose E the design makes certain ("" = the first pair).
    adaptive_pair: str = ""
    # Stop once E's 95 % interval half-width is at most this share of E.
    adaptive_threshold: float = 0.10
    # The design runs' compute budget, as a multiple of the FLOPs of the full grid's design
    # runs with their branches (1 = no more than the fixed design).
    adaptive_budget: float = 1.0
    # Each round's share of the budget (the last round takes what is left).
    adaptive_round: float = 0.15
    # Round 0: the grid's runs at these weights of the target pair, every size (() = the
    # middle weight).
    adaptive_initial: tuple[float, ...] = ()
    # Zoo sizes the design may also pick, beside StudySpec.sizes, at the grid's weights and
    # seeds (a larger size pins E where the grid's sizes cannot); never in round 0.
    adaptive_sizes: tuple[str, ...] = ()


#: StudySpec's attribute of each section -> the section
SECTIONS: dict[str, type] = {"schedule": Schedule, "branches": Branches, "early_stop": EarlyStop,
                             "evaluation": Evaluation, "design": MixtureDesign, "cache": Cache,
                             "compute": Compute, "verification": Verification,
                             "adaptive": Adaptive}
#: field name -> StudySpec's attribute of the section that declares it
FIELD_SECTIONS: dict[str, str] = {f.name: attr for attr, section in SECTIONS.items()
                                  for f in dataclasses.fields(section)}


def train_paths() -> dict[str, str]:
    """TrainConfig path -> the StudySpec field that sets it, for the fields whose names differ
    (`TRAIN_PATH` metadata)."""
    return {f.metadata[TRAIN_PATH]: f.name for section in SECTIONS.values()
            for f in dataclasses.fields(section) if TRAIN_PATH in f.metadata}


def flat_names(spec_class: type) -> list[str]:
    """Every field of a study class by its flat name: its own (the grid's), then each
    section's."""
    own = [f.name for f in dataclasses.fields(spec_class) if f.name not in SECTIONS]
    return own + list(FIELD_SECTIONS)


def field_value(spec: Any, name: str) -> Any:
    """The value of the field of flat name `name` of a StudySpec, in its section or its own."""
    section = FIELD_SECTIONS.get(name)
    return getattr(getattr(spec, section) if section else spec, name)
