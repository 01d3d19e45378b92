"""Optimisers and learning-rate schedules (T5X's `adafactor` + `rsqrt_decay` roles, on optax).

Fernandes et al. (2023, §3.1 / App. A) train every model with Adafactor and an inverse
square-root schedule, as T5X does by default; that is the default here. The Adafactor defaults
follow T5X's `adafactor_decay_rate=0.8`, update clipping at RMS 1.0, parameter-scale
multiplication and factored second moments for matrices whose smaller side is at least 128.

AdamW (`OptimizerConfig.name="adamw"`) is Adam (Kingma & Ba 2015) with decoupled weight decay
(Loshchilov & Hutter 2019), as used with an inverse square-root schedule by Chen et al. (2023,
App. B) and with a cosine schedule by Caillaut et al. (2024, §3.5). One function,
`learning_rate_schedule`, builds every schedule (docs/guides/training.md gives the formulas).
"""

from __future__ import annotations

import contextlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mnmt.training.config import COOLDOWN_SHAPES, DECAYS, OptimizerConfig

__all__ = ["DECAYS", "COOLDOWN_SHAPES", "Schedule", "learning_rate_schedule", "rsqrt_schedule",
           "schedule_for", "make_optimizer", "decay_mask"]

WARMUPS = ("linear", "constant")


def learning_rate_schedule(
    learning_rate: float, warmup_steps: int, warmup: str = "linear", *,
    total_steps: int | None = None, cooldown_steps: int = 0, decay: str = "rsqrt",
    cooldown_shape: str = "linear", final_lr_fraction: float = 0.0,
) -> optax.Schedule:
    """The rate at update `count` (0-based; update s = count + 1) for every `decay`.

    After the warm-up the rate is, with w = `warmup_steps`, T = `total_steps`, lr = `learning_rate`:

    - "rsqrt": ``lr · rsqrt(max(s, w))`` (T5X's default; lr is the scale of 1/√s, the peak is
      lr/√w);
    - "constant": ``lr`` (the peak itself) until the cool-down — with `cooldown_steps` it is the
      warm-up–stable–decay (WSD) schedule of Zhai et al. 2022 and Hägele et al. 2024. With a
      constant rate a converged model's loss is flat until the cool-down, so a curve that still
      drops there is still learning, not following the schedule;
    - "cosine": ``lr · (f + (1 − f) · ½(1 + cos(π·x)))`` with x = (s − w)/(T − w) clipped to
      [0, 1] and f = `final_lr_fraction` (Loshchilov & Hutter 2017's half cosine, one cycle): lr
      at the end of the warm-up, f·lr at the last update s = T (Caillaut et al. 2024 §3.5).

    `warmup="linear"` multiplies by min(s/w, 1), a ramp from lr(w)/w at s = 1 to the rate lr(w)
    at s = w; `warmup="constant"` does not (T5X's `rsqrt_decay`, flat at lr/√w during warm-up).

    With `cooldown_steps` = c > 0 (and T) the rate is also multiplied by a ramp over the last c
    updates, of `cooldown_shape` with x the share of it done (0 → 1): "linear" 1 − x (T5X's
    `linear_decay`, at the end only) or "1-sqrt" 1 − √x (Hägele et al. 2024 §3, lower than linear
    at the same length). The slowly decaying rsqrt rate leaves a gradient-noise floor above the
    loss a model can reach; the cool-down removes it, so short runs end near convergence.

    With "rsqrt" and "constant" the rate before the cool-down depends on the step only, so a run
    cooled down from step b of a longer run is the run trained for b + cool-down steps
    (`mnmt.training.branches`); the cosine depends on T at every step, so cosine runs have no
    branches.
    """
    _check_schedule(warmup_steps, warmup, total_steps, cooldown_steps, decay, cooldown_shape,
                    final_lr_fraction)
    lr, w = float(learning_rate), float(warmup_steps)
    final = float(final_lr_fraction)
    span = float(total_steps) - w if decay == "cosine" else 1.0

    def schedule(count, ends=None):
        step = jnp.asarray(count, jnp.float32) + 1.0
        if decay == "rsqrt":
            value = lr * jnp.reciprocal(jnp.sqrt(jnp.maximum(step, w)))
        elif decay == "cosine":
            x = jnp.clip((step - w) / span, 0.0, 1.0)
            value = lr * (final + (1.0 - final) * 0.5 * (1.0 + jnp.cos(math.pi * x)))
        else:
            value = jnp.full_like(step, lr)
        if warmup == "linear":
            value = value * jnp.minimum(step / w, 1.0)
        if cooldown_steps:
            if ends is None:
                left = float(total_steps) - jnp.asarray(count, jnp.float32)
                remaining = jnp.clip(left / float(cooldown_steps), 0.0, 1.0)  # 1 − x
            else:  # (T, 1/c) are an input of the program being traced (`Schedule.bound`)
                left = ends[0] - jnp.asarray(count, jnp.float32)
                remaining = jnp.clip(left * ends[1], 0.0, 1.0)
            if cooldown_shape == "1-sqrt":
                remaining = 1.0 - jnp.sqrt(1.0 - remaining)
            value = value * remaining
        return value

    return Schedule(schedule, total_steps if cooldown_steps else None, cooldown_steps)


class Schedule:
    """A learning-rate schedule (``schedule(count)``, as optax calls it) whose cool-down can be
    an input of the compiled program instead of a constant in it.

    ``inputs`` holds (T, 1/c) in float32 (None without a cool-down). While ``bound(ends)`` is
    open — during the tracing of a step that takes ``inputs`` as its argument ``ends`` — the
    cool-down ramp reads T and 1/c from ``ends``, so one compiled step serves every cool-down
    branch of a run (branches differ in T and c only). The rate is the same to the bit: XLA
    compiles ``left / c`` with a constant c as ``left * (1/c)``, the product ``ends`` gives.
    Outside ``bound`` (eager calls, other programs) the schedule is the function itself."""

    def __init__(self, rate, total_steps: int | None, cooldown_steps: int) -> None:
        self._rate = rate
        self._ends = None
        self.inputs = None if total_steps is None else np.array(
            [total_steps, np.float32(1.0) / np.float32(cooldown_steps)], np.float32)

    def __call__(self, count):
        return self._rate(count, self._ends)

    @contextlib.contextmanager
    def bound(self, ends):
        """Read the cool-down's (T, 1/c) from ``ends`` (a traced input) while open."""
        previous, self._ends = self._ends, ends
        try:
            yield
        finally:
            self._ends = previous


# The schedule's first name (it began with the rsqrt decay only); callers may use either.
rsqrt_schedule = learning_rate_schedule


def _check_schedule(warmup_steps, warmup, total_steps, cooldown_steps, decay, cooldown_shape,
                    final_lr_fraction) -> None:
    if cooldown_steps < 0:
        raise ValueError(f"cooldown_steps must be ≥ 0, got {cooldown_steps}")
    if cooldown_steps and (total_steps is None or cooldown_steps > total_steps):
        raise ValueError(f"cooldown_steps ({cooldown_steps}) needs total_steps ≥ cooldown_steps, "
                         f"got {total_steps}")
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be ≥ 1, got {warmup_steps}")
    if warmup not in WARMUPS:
        raise ValueError(f"warmup must be one of {WARMUPS}, got {warmup!r}")
    if decay not in DECAYS:
        raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}")
    if cooldown_shape not in COOLDOWN_SHAPES:
        raise ValueError(f"cooldown_shape must be one of {COOLDOWN_SHAPES}, got "
                         f"{cooldown_shape!r}")
    if not 0.0 <= final_lr_fraction <= 1.0:
        raise ValueError(f"final_lr_fraction must be in [0, 1], got {final_lr_fraction!r}")
    if decay != "cosine" and final_lr_fraction:
        raise ValueError(f"final_lr_fraction ({final_lr_fraction}) is read by decay='cosine' "
                         f"only, got decay={decay!r}")
    if decay == "cosine" and (total_steps is None or total_steps <= warmup_steps):
        raise ValueError(f"decay='cosine' needs total_steps > warmup_steps ({warmup_steps}), "
                         f"got {total_steps}")


def schedule_for(config) -> optax.Schedule:
    """The learning-rate schedule of a `TrainConfig` (its rate, warm-up, decay and cool-down)."""
    return learning_rate_schedule(
        config.learning_rate, config.warmup_steps, config.warmup,
        total_steps=config.train_steps, cooldown_steps=config.cooldown_steps,
        decay=config.decay, cooldown_shape=config.cooldown_shape,
        final_lr_fraction=config.final_lr_fraction)


def decay_mask(params):
    """True for the parameters AdamW decays: those of ≥ 2 dimensions (matrices, embeddings),
    not 1-D layer-norm scales or biases (the usual exclusion, e.g. GPT-NeoX's and BERT's)."""
    return jax.tree.map(lambda p: jnp.ndim(p) > 1, params)


def make_optimizer(
    schedule: optax.Schedule, config: OptimizerConfig | None = None
) -> optax.GradientTransformation:
    """`config`'s optimiser (Adafactor or AdamW, optax) driven by `schedule`, optionally
    preceded by global-norm clipping of the gradient."""
    config = config or OptimizerConfig()
    if config.name == "adamw":
        tx = optax.adamw(learning_rate=schedule, b1=config.b1, b2=config.b2, eps=config.adam_eps,
                         weight_decay=config.weight_decay, mask=decay_mask)
    else:
        tx = optax.adafactor(
            learning_rate=schedule,
            min_dim_size_to_factor=config.min_dim_size_to_factor,
            decay_rate=config.decay_rate,
            multiply_by_parameter_scale=config.multiply_by_parameter_scale,
            clipping_threshold=config.clipping_threshold,
            momentum=config.momentum,
            weight_decay_rate=config.weight_decay_rate,
            eps=config.eps,
            factored=config.factored,
        )
    if config.max_grad_norm is None:
        return tx
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), tx)
