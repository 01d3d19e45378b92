"""What one training run needs, grouped by concern (T5X's `SaveCheckpointConfig` style).

`TrainConfig` holds the run's identity, model, optimisation and mesh; the grouped sections are
their own gin-configurable dataclasses, bound in gin files as in `t5x_configs/runs/train.gin`:

    TrainConfig.inputs = @InputConfig()
    InputConfig.batch_size = %BATCH_SIZE
    TrainConfig.eval = @EvalConfig()
    EvalConfig.period = %EVAL_PERIOD

Every field is described where it is declared; defaults are the CPU study's.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any

import gin

from mnmt.models.configs import ACTIVATION_DTYPES, PARTITIONING_RULES, REMAT_POLICIES

__all__ = ["OptimizerConfig", "optimizer_problems", "DECAYS", "COOLDOWN_SHAPES", "OPTIMIZERS",
           "InputConfig", "EvalConfig", "DecodeConfig", "CheckpointConfig",
           "BranchConfig", "TrackingConfig",
           "TrainConfig",
           "ACTIVATION_DTYPES", "REMAT_POLICIES", "PARTITIONING_RULES"]


# The names TrainConfig.decay, TrainConfig.cooldown_shape and OptimizerConfig.name accept (one rule:
# mnmt.training.optimizer builds them, run_setup and mnmt.study.spec check them).
DECAYS = ("rsqrt", "constant", "cosine")
COOLDOWN_SHAPES = ("linear", "1-sqrt")
OPTIMIZERS = ("adafactor", "adamw")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """The optimiser: Adafactor with T5X's defaults (the default) or AdamW, each optionally after
    global-norm gradient clipping. The fields of the optimiser not chosen must keep their
    defaults (an error names any that does not, so a setting is never silently ignored).

    `max_grad_norm` clips the *gradient* by its global L2 norm before the optimiser (off by
    default, as in T5X); `clipping_threshold` is Adafactor's own update clipping (Shazeer & Stern
    2018). docs/guides/training.md, "Optimisers and schedules", gives the update rules.
    """

    # "adafactor" (Shazeer & Stern 2018; T5X's and Fernandes et al. 2023's) or "adamw" (Adam with
    # decoupled weight decay, Loshchilov & Hutter 2019; Chen et al. 2023, Caillaut et al. 2024).
    name: str = "adafactor"
    # Adafactor only. Decay exponent of the second-moment average, β2_t = 1 − t^(−decay_rate)
    # (T5X's adafactor_decay_rate).
    decay_rate: float = 0.8
    # Adafactor only. Update clipping at this RMS (Shazeer & Stern 2018 §6); None: off.
    clipping_threshold: float | None = 1.0
    # Adafactor only. Scale each update by its parameter's RMS (relative step size).
    multiply_by_parameter_scale: bool = True
    # Adafactor only. Factored second moments (row and column averages) for matrices ...
    factored: bool = True
    # ... whose smaller side is at least this long; smaller ones keep a full second moment.
    min_dim_size_to_factor: int = 128
    # Adafactor only. First-moment decay; None: no momentum (T5X's default).
    momentum: float | None = None
    # Adafactor only. Its weight decay rate (optax.adafactor's, on every parameter); None: none.
    weight_decay_rate: float | None = None
    # Adafactor only. Its ε₁, added to the squared gradients (not Adam's `adam_eps`).
    eps: float = 1e-30
    # AdamW only. Decays of Adam's first and second moments, β1 and β2, in [0, 1) (Kingma & Ba
    # 2015; these defaults are theirs).
    b1: float = 0.9
    b2: float = 0.999
    # AdamW only. Adam's ε, added to √v̂ in the update's denominator (> 0).
    adam_eps: float = 1e-8
    # AdamW only. Decoupled weight decay λ ≥ 0: each step also subtracts η_t·λ·θ (η_t the scheduled
    # rate, as PyTorch's and optax's AdamW), on parameters of ≥ 2 dimensions only (weight
    # matrices and embeddings; not layer-norm scales or biases); 0: plain Adam.
    weight_decay: float = 0.0
    # Both. Clip the gradient to this global L2 norm before the optimiser (> 0); None: off.
    max_grad_norm: float | None = None

    def __post_init__(self) -> None:
        problems = optimizer_problems(self)
        if problems:
            raise ValueError("invalid OptimizerConfig: " + "; ".join(problems))


# The fields only one optimiser reads (the other's must keep their defaults).
_ADAFACTOR_ONLY = ("decay_rate", "clipping_threshold", "multiply_by_parameter_scale", "factored",
                   "min_dim_size_to_factor", "momentum", "weight_decay_rate", "eps")
_ADAMW_ONLY = ("b1", "b2", "adam_eps", "weight_decay")


def optimizer_problems(config: OptimizerConfig) -> list[str]:
    """What is wrong with `config` (an empty list: nothing), each naming `OptimizerConfig.<field>`."""
    if config.name not in OPTIMIZERS:
        close = difflib.get_close_matches(str(config.name), OPTIMIZERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return [f"OptimizerConfig.name: unknown optimiser {config.name!r}{hint}; expected one of "
                f"{', '.join(OPTIMIZERS)}"]
    problems = []
    unused = _ADAMW_ONLY if config.name == "adafactor" else _ADAFACTOR_ONLY
    defaults = {f.name: f.default for f in dataclasses.fields(OptimizerConfig)}
    for field in unused:
        if getattr(config, field) != defaults[field]:
            problems.append(f"OptimizerConfig.{field}: {getattr(config, field)!r} is not read by "
                            f"OptimizerConfig.name={config.name!r}; keep its default "
                            f"{defaults[field]!r} or choose the optimiser that reads it")
    for field in ("b1", "b2"):
        if not _is_number(getattr(config, field)) or not 0.0 <= getattr(config, field) < 1.0:
            problems.append(f"OptimizerConfig.{field}: expected a decay in [0, 1), got "
                            f"{getattr(config, field)!r}")
    if config.momentum is not None and (not _is_number(config.momentum)
                                        or not 0.0 <= config.momentum < 1.0):
        problems.append(f"OptimizerConfig.momentum: expected None or a decay in [0, 1), got "
                        f"{config.momentum!r}")
    for field in ("adam_eps", "eps"):
        if not _is_number(getattr(config, field)) or not getattr(config, field) > 0:
            problems.append(f"OptimizerConfig.{field}: expected a number > 0, got "
                            f"{getattr(config, field)!r}")
    if not _is_number(config.weight_decay) or not config.weight_decay >= 0:
        problems.append(f"OptimizerConfig.weight_decay: expected a number ≥ 0, got "
                        f"{config.weight_decay!r}")
    if config.max_grad_norm is not None and (not _is_number(config.max_grad_norm)
                                             or not config.max_grad_norm > 0):
        problems.append(f"OptimizerConfig.max_grad_norm: expected None (off) or a positive "
                        f"norm, got {config.max_grad_norm!r}")
    return problems


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@gin.configurable
@dataclasses.dataclass
class InputConfig:
    """The training input pipeline (SeqIO mixture or task → packed batches)."""

    # SeqIO mixture or task to train on (T5X's MIXTURE_OR_TASK_NAME).
    mixture_or_task_name: str
    # Feature lengths {"inputs": int, "targets": int} (T5X's TASK_FEATURE_LENGTHS).
    feature_lengths: dict[str, int]
    # Packed rows per step (global, over all hosts); rounded down, with a warning, to a multiple
    # of the data-parallel size (mesh data axis, input shards): run_setup.resolve_batch_size.
    batch_size: int
    # If set, the batch in target tokens instead: rows = batch_tokens // targets length.
    batch_tokens: int | None = None
    # Input shards (one per process by default: jax.process_count()).
    shards: int | None = None
    # Batches prepared ahead in a background thread.
    prefetch: int = 2
    # Directories searched for token caches (`<dir>/<task>/`, built by `mnmt-study prepare`): a
    # finite task found there is read by index instead of being held in memory.
    cache_dirs: tuple[str, ...] = ()
    # Decoder-only format options (Caillaut et al. 2024 §3.3, §3.3.1; mnmt.data.decoder_format);
    # an encoder-decoder run with any of them set is refused, naming the field.
    # The source language's <2xx> token after the target-language token (their <lang_src>).
    source_language_tags: bool = False
    # Task or pair name -> domain name: the tag <dom_NAME> follows the language tokens (a
    # vocabulary piece: mnmt-train adds it when it trains the vocabulary). None: no domain tags.
    domains: dict[str, str] | None = None
    # Prefix every source with <eos>, in training and at decoding (their fix of the <eos> issue).
    prefix_eos: bool = False
    # Loss weight 1 on the source-language / domain tags in training rows (evaluation rows
    # never weight them: `loss` stays per target token and decoding forces the tags).
    loss_on_tags: bool = False
    # One segment per packed example (no attention across examples); False: their unmasked
    # packing, which causes the <eos> issue.
    mask_segments: bool = True


@gin.configurable
@dataclasses.dataclass
class EvalConfig:
    """Periodic teacher-forced evaluation: per-pair cross-entropy on every eval set."""

    # pair -> SeqIO task evaluated (e.g. {"en-de": "synth_en_de"}).
    tasks: dict[str, str]
    # Splits evaluated for every pair; the first one is the run's headline loss.
    sets: tuple[str, ...] = ("validation",)
    # Evaluate every `period` steps and at the last step.
    period: int = 100
    # Rows per evaluation batch (rounded up to a multiple of the mesh's data axis).
    batch_size: int = 64
    # Keep the eval batches in memory between evaluations.
    cache_batches: bool = True
    # Probe evaluations: a precise training curve per pair. Every `probe_every` steps, at the
    # last step and at an early stop (`stop_step`), each pair's `loss` (teacher-forced, as on an
    # eval set) on its fixed probe set, written as `probe_loss` rows
    # (docs/reference/metrics_schema.md): the same examples every time, so the curve's points
    # differ by the model only, not by the batch (train_loss rows scatter with their batches).
    # Scored by the same program as the eval sets; 0: off.
    probe_every: int = 0
    # Examples in each pair's probe set: the first ones of its first eval set (`sets[0]`), all
    # of them when the split has fewer. Kept on the devices for the whole run.
    probe_examples: int = 128


@gin.configurable
@dataclasses.dataclass
class DecodeConfig:
    """Beam-search decoding scored with sacrebleu BLEU and ChrF."""

    # Decode (BLEU/ChrF rows) at the last step.
    at_end: bool = True
    # Further steps at which to decode.
    steps: tuple[int, ...] = ()
    # Examples decoded per pair and eval set (the first ones); 0: the whole eval split.
    num_examples: int = 64
    beam_size: int = 4
    # Length penalty alpha of the beam search.
    alpha: float = 0.6
    # Longest decode; default: the targets feature length.
    max_length: int | None = None


@gin.configurable
@dataclasses.dataclass
class CheckpointConfig:
    """Orbax checkpoints: periodic, at the last step and on SIGTERM; the newest `keep` kept."""

    # Save every `period` steps (and at the last step, and on preemption).
    period: int = 200
    # Checkpoints kept (older ones are deleted).
    keep: int = 2
    # Steps also saved and never deleted (the branch points of BranchConfig; set by the trainer).
    keep_steps: tuple[int, ...] = ()


@gin.configurable
@dataclasses.dataclass
class TrackingConfig:
    """Tracking beside TensorBoard (`mnmt.training.tracking`): Weights & Biases and profiles.

    Both are off by default; W&B needs the `tracking` extra (`pip install
    "mnmt-scaling[tracking]"`). metrics.jsonl is written either way.
    """

    # W&B project the run logs to; "" (the default): no W&B.
    wandb_project: str = ""
    # "online" (log to the W&B server as the run trains) or "offline" (write the run under
    # wandb_dir only; upload it later with `wandb sync`).
    wandb_mode: str = "online"
    # W&B entity (user or team) owning the project; "": the logged-in user's default entity.
    wandb_entity: str = ""
    # Display name of the W&B run; "": the run's run_id.
    wandb_name: str = ""
    # Tags of the W&B run.
    wandb_tags: tuple[str, ...] = ()
    # W&B group the run belongs to; "": the run's study (TrainConfig.study), if any.
    wandb_group: str = ""
    # Local directory W&B writes its files under (`<dir>/wandb/`); "": the run directory
    # (model_dir), or W&B's own default when model_dir is remote.
    wandb_dir: str = ""
    # (A, B): a jax.profiler trace of steps A to B, both included (1 ≤ A ≤ B ≤ train_steps),
    # written under model_dir/events/plugins/profile for TensorBoard; None: no trace.
    profile_steps: tuple[int, int] | None = None


@gin.configurable
@dataclasses.dataclass
class BranchConfig:
    """Cool-down branches (Hägele et al. 2024): budgets D from one run (`mnmt.training.branches`).

    At each branch point b the run keeps its checkpoint; after the run, a branch — its own run
    directory `MODEL_DIR_cd<b>` — resumes from it and cools the rate down to 0 over c_b steps,
    ending at D_b = b + c_b: the run trained for D_b steps with the same schedule.
    """

    # Branch points: fractions of train_steps (0 < x < 1) or step numbers (integers ≥ 1), before
    # the run's own cool-down starts.
    points: tuple[float, ...] = ()
    # Share of each branch's steps that its cool-down takes, c_b = b·f/(1 − f); None: the run's
    # own share, cooldown_steps / train_steps (then a branch is the shorter run exactly).
    cooldown_fraction: float | None = None
    # Set on a branch's own config (by `branches.branch_configs`): the parent's run directory and
    # the step whose checkpoint the branch starts from.
    parent_dir: str = ""
    parent_step: int = 0


@gin.configurable
@dataclasses.dataclass
class TrainConfig:
    """One training run: identity, model, optimisation, mesh, and the grouped sections above."""

    # Run directory (docs/reference/metrics_schema.md): run.json, metrics.jsonl, checkpoints/, events/.
    model_dir: str
    # Zoo size name, e.g. "mini-2" (`mnmt-zoo` lists them).
    model_size: str
    # SentencePiece .model shared by all pairs.
    vocabulary_path: str
    train_steps: int
    inputs: InputConfig
    eval: EvalConfig
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    # The schedule (mnmt.training.optimizer.learning_rate_schedule; docs/guides/training.md,
    # "Optimisers and schedules"). learning_rate's meaning depends on `decay`: with "rsqrt" it is
    # the scale of 1/√step (rate learning_rate · rsqrt(max(step, warmup_steps)), peak
    # learning_rate/√warmup_steps); with "constant" and "cosine" it is the peak rate itself.
    learning_rate: float = 1.0
    warmup_steps: int = 100
    # "linear" ramp from 0 to the rate at warmup_steps, or T5X's "constant" rsqrt_decay warm-up.
    warmup: str = "linear"
    # After the warm-up (DECAYS): "rsqrt" (T5X's default); "constant" (a stable rate until the
    # cool-down: with cooldown_steps > 0 the warm-up–stable–decay schedule, WSD, of Zhai et al.
    # 2022 and Hägele et al. 2024); or "cosine" (a half cosine from learning_rate down to
    # final_lr_fraction · learning_rate at train_steps, Loshchilov & Hutter 2017; no branches).
    decay: str = "rsqrt"
    # decay="cosine" only: the rate at the last step as a share of learning_rate, in [0, 1].
    final_lr_fraction: float = 0.0
    # Decay of the rate to 0 over the last `cooldown_steps` steps (0: none) ...
    cooldown_steps: int = 0
    # ... of this shape (COOLDOWN_SHAPES): "linear" (1 − x) or "1-sqrt" (1 − √x), x the share of
    # it done.
    cooldown_shape: str = "linear"
    # Cool-down branches of this run (none by default).
    branches: BranchConfig = dataclasses.field(default_factory=BranchConfig)
    # Stop early at this step (0, or ≥ train_steps: train to the end) with the schedule of the
    # full train_steps: the stopped run is a prefix of the full run (evaluated and checkpointed
    # at the stop, run.json status "stopped", the planned rates of the remaining steps logged as
    # `planned_learning_rate` rows), and the same config without stop_step resumes it to the end.
    stop_step: int = 0
    label_smoothing: float = 0.0
    z_loss: float = 1e-4
    dropout_rate: float = 0.0
    # Activation and matmul dtype of the model: "float32", or "bfloat16" (mixed precision, T5X's
    # default on TPU). Parameters, gradients, optimizer state, logits and loss stay float32.
    activation_dtype: str = "float32"
    # Rematerialisation of each encoder/decoder layer in the backward pass: "none", "full"
    # (recompute the layer from its input), "minimal" (keep the projections' matmul outputs) or
    # "dots_saveable" (keep every matmul output). Less memory for more compute; same gradients.
    remat_policy: str = "none"
    # Seed of parameters, dropout and data order.
    seed: int = 0
    # Micro-batches per step whose gradients are summed (token-weighted): less activation memory,
    # same gradient; must divide the rows per step (and leave whole rows per data-axis device).
    gradient_accumulation_steps: int = 1
    # Output projection + cross-entropy in this many slices of the target sequence
    # (mnmt.models.losses.tiled_cross_entropy_terms): the [tokens, vocab] logits and their
    # gradient exist one slice at a time; same loss, one more projection matmul. 1: untiled.
    loss_tiles: int = 1
    # The optimiser (Adafactor or AdamW) and its settings; None: Adafactor with T5X's defaults
    # (OptimizerConfig()).
    optimizer: OptimizerConfig | None = None
    # Device mesh (data, model); -1 = all remaining devices.
    mesh_shape: tuple[int, int] = (-1, 1)
    # Named logical-axis rule set (mnmt.models.partitioning): "standard" (T5X's 1-D model
    # parallelism, parameters replicated over the data axis) or "fsdp" (parameters and their
    # optimizer slots also split over the data axis; all-gathered for each step).
    partitioning_rules: str = "standard"
    # Explicit logical-axis rules replacing the named set (then partitioning_rules must stay
    # "standard"); None: the set partitioning_rules names.
    logical_axis_rules: tuple[tuple[str, Any], ...] | None = None
    # Run id recorded in every metrics row; default: basename of model_dir.
    run_id: str = ""
    # Study this run belongs to (run.json).
    study: str = ""
    # pair -> p recorded in run.json; None: read from the SeqIO mixture's rates.
    mixture_weights: dict[str, float] | None = None
    # pair -> training-example cap D_i recorded in run.json (None: uncapped).
    mixture_caps: dict[str, int | None] | None = None
    # Recorded in run.json["extra"] (e.g. the exact irreducible losses).
    extra: dict | None = None
    # train_loss / learning_rate rows and progress lines every `log_every` steps.
    log_every: int = 10
    # Peak FLOP/s for MFU; None: measured matmul peak of this host.
    peak_flops: float | None = None
    # Write TensorBoard event files under model_dir/events.
    tensorboard: bool = True
    # Weights & Biases logging and profiler traces (off by default).
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)

    def updated(self, **changes: Any) -> TrainConfig:
        """A copy with `changes`; a section given as a dict updates only the fields it names.

        `config.updated(train_steps=4, eval={"period": 2})` keeps every other eval field.
        """
        for name, value in list(changes.items()):
            if name in _SECTIONS and isinstance(value, dict):
                changes[name] = dataclasses.replace(getattr(self, name), **value)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON-serialisable when the field values are)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict` (lists back to tuples where the fields are tuples)."""
        d = dict(d)
        for name, section in _SECTIONS.items():
            if isinstance(d.get(name), dict):
                d[name] = section(**d[name])
        if d.get("optimizer") is not None and isinstance(d["optimizer"], dict):
            d["optimizer"] = OptimizerConfig(**d["optimizer"])
        config = cls(**d)
        config.mesh_shape = tuple(config.mesh_shape)
        config.eval.sets = tuple(config.eval.sets)
        config.decode.steps = tuple(config.decode.steps)
        config.checkpoint.keep_steps = tuple(config.checkpoint.keep_steps)
        config.branches.points = tuple(config.branches.points)
        config.tracking.wandb_tags = tuple(config.tracking.wandb_tags)
        if config.tracking.profile_steps is not None:
            config.tracking.profile_steps = tuple(config.tracking.profile_steps)
        return config


_SECTIONS = {"inputs": InputConfig, "eval": EvalConfig, "decode": DecodeConfig,
             "checkpoint": CheckpointConfig, "branches": BranchConfig,
             "tracking": TrackingConfig}
