"""Studies: a grid of model sizes x mixture weights x seeds, expanded into runs.

A study follows Fernandes et al. 2023 §3: every language pair is trained in mixtures whose
sampling weights vary over a grid (two pairs: p for the first pair and 1 - p for the second;
K pairs: points of a simplex grid), every model size of a zoo is trained on every mixture, and
every run is evaluated on every pair (p = 0 still means "evaluated, not trained").

`StudySpec` is gin-configurable, so a study is a gin file in `t5x_configs/studies/`; the built-in
CPU presets are plain Python values in `PRESETS`.

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
    # Probe evaluations (EvalConfig.probe_every, probe_examples): every `probe_every` steps (0 =
    # off) each pair's loss on the same first `probe_examples` examples of its first eval set,
    # written as `probe_loss` rows, a curve per pair whose points differ by the model only; the
    # curve laws of the report fit it where present (docs/guides/training.md, "Probe curves").
    probe_every: int = 0
    probe_examples: int = 128
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
    # Early stop: each design run that is not a check (below) stops at ⌈stop_fraction · its
    # steps⌉ with the schedule of all its steps, so it is a prefix of the full run (the same study
    # with stop_fraction=1 later resumes it to the end), and the report predicts its cooled-down
    # end from its curve with an interval (fitting.report.sections.early_stop). 1 = off. Held-out runs are
    # never stopped; branches that would leave a stopped run after its stop are not trained
    # (their ends are predicted; L(N, D) takes them, and the stopped run's end, marked predicted).
    stop_fraction: float = 1.0
    # The design runs still trained to the end, whose trained ends check the predictions: () =
    # one experiment per size with all its seeds (the size's seed-repeated experiment where it
    # has one, else its middle mixture); ("all",) = every design run (nothing saved: a benchmark
    # of the predictions); else run ids (`mnmt-study plan` lists them).
    stop_checks: tuple[str, ...] = ()
    # Fewer cool-down branches: True trains, of each size, only the middle branch (by step) of
    # one experiment with all its seeds — the size's seed-repeated experiment where it has one,
    # else its middle mixture (`expansion.branch_check_runs`) — as the check, and the report
    # takes every other planned budget of L(N, D) from the run's curve, marked predicted
    # (fitting.report.predicted_budgets; benchmarks/RESULTS.md §96). Held-out runs as
    # `heldout_branches` says. False (the default) trains every branch.
    branch_checks: bool = False
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
    # and shows predicted against measured (seeds: `heldout_seeds`).
    heldout: tuple = ()
    # Seeds of each held-out run (>= 1): the first of `seeds` and, from 2 on, seed replicates
    # (the rest of `seeds`, then the integers after the largest), all held out. The report judges
    # the prediction against the seed-to-seed sd they measure (fitting.report.sections.heldout); with one
    # seed, against the study's seed noise (seed_repeats) or the 2 % clause alone.
    heldout_seeds: int = 1
    # Whether held-out runs get cool-down branches too (`cooldown_branches`): the report judges
    # a held-out run by its final loss, so their branches only feed the curve section; False
    # trains none (the default study saves a fifth of its held-out runs' time).
    heldout_branches: bool = True
    # Grid runs repeated with another seed, as (size, weight, seed) entries (e.g.
    # (("mini-2", 0.5, 1),)): fitted like the grid (the report averages seeds); they measure the
    # seed noise that the leave-largest-size-out backtest is judged against (Ghorbani App. C).
    seed_repeats: tuple = ()
    # Runs of one size (and step count) trained together as one vmapped program on this host
    # (`mnmt.training.trainer.train_group`); 1 trains them one at a time. Bounded by memory:
    # a group holds this many copies of the parameters and optimizer state.
    max_group: int = 8
    # Verification (mnmt.study.verify): after the report, train its recommended K-pair weights
    # and the study's baselines at the size it recommends for (report_target_sizes[0]; verify_size
    # may name it, "" = found among sizes/heldout) with verify_seeds seeds (>= 2; the same for
    # every mixture: compared paired by seed), and report measured against predicted;
    # `mnmt-study verify OUT` on demand.
    verify: bool = False
    verify_size: str = ""
    verify_seeds: int = 3
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


PRESETS: dict[str, StudySpec] = {
    # The main job (SPEC §6): 4 sizes x 5 weights on the 2-pair synthetic family, plus one
    # held-out run at a 5x larger size and an unseen weight. The sizes are one ladder of 1-layer
    # widths (micro-1 … mini-1), each trained 2,000 steps of 32 rows: at 1,000 steps the
    # largest size still leaves the limit E of L(N, D) free and the larger size is predicted
    # 17 % low; at 2,000 it lands within ≈ 2 % (benchmarks/RESULTS.md §83, §87). The rsqrt
    # schedule ends with a cool-down over the last 20 % of steps, and cool-down branches at
    # 45, 60 and 75 % of each run (10 % of each branch cools down: budgets of 1,000, 1,333,
    # 1,667 and 2,000 steps) give L(N, D) four cooled-down budgets per run; mini-1 at p = 0.5
    # repeated with seeds 1 and 2 for the seed noise at the largest fitted size (3 seeds, 2 dof:
    # a sd from 2 seeds is information only); the held-out mini-3 (2 layers, 296K) trained like
    # the grid with seeds 0, 1 and 2 and no cool-down branches (it is judged by its final
    # loss), its prediction judged against their measured sd
    # (docs/guides/studies.md: the built-in CPU study).
    "default": StudySpec(
        sizes=("micro-1", "micro-2", "micro-3", "mini-1"),
        weights=(0.0, 0.3, 0.5, 0.7, 1.0),
        heldout=(("mini-3", 0.6),),
        heldout_seeds=3,
        heldout_branches=False,
        # Fewer pieces than cpu-tiny's word types: both targets' rarer words are spelled in
        # pieces, which keeps both pairs capacity-bound across the micro sizes.
        vocab_size=704,
        feature_lengths=(("inputs", 36), ("targets", 36)),
        train_steps=2000,
        batch_size=32,
        # Evaluations at 500, 1,000, 1,500 and the end: before the cool-down (the regime's
        # slope) and four in all (the convergence correction's fit); the laws read only
        # cooled-down ends, and an evaluation costs a group ~20 of its steps.
        eval_every=500,
        # No probe curve: measured every 50 steps it cost about 5 % of the training steps and
        # neither scattered less than the train_loss rows nor made the curve laws closer
        # (benchmarks/RESULTS.md §97–98); `--gin StudySpec.probe_every=50` turns it on.
        probe_every=0,
        checkpoint_every=1000,
        cooldown_fraction=0.2,
        cooldown_branches=(0.45, 0.6, 0.75),
        branch_cooldown_fraction=0.1,
        seed_repeats=(("mini-1", 0.5, 1), ("mini-1", 0.5, 2)),
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
