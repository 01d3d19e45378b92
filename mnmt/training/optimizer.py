"""Optimiser and learning-rate schedule (T5X's `adafactor` + `rsqrt_decay` roles, on optax).

Fernandes et al. (2023, §3.1 / App. A) train every model with Adafactor and an inverse
square-root schedule, as T5X does by default. The defaults below follow T5X's
`adafactor_decay_rate=0.8`, update clipping at RMS 1.0, parameter-scale multiplication and
factored second moments for matrices whose smaller side is at least 128.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

from mnmt.training.config import OptimizerConfig

DECAYS = ("rsqrt", "constant")
COOLDOWN_SHAPES = ("linear", "1-sqrt")


def rsqrt_schedule(
    learning_rate: float, warmup_steps: int, warmup: str = "linear", *,
    total_steps: int | None = None, cooldown_steps: int = 0, decay: str = "rsqrt",
    cooldown_shape: str = "linear",
) -> optax.Schedule:
    """Inverse square-root decay: ``lr · rsqrt(max(step, warmup_steps))``.

    `decay="constant"` holds the rate at ``lr`` after the warm-up instead (a warm-up, a stable
    phase and, with `cooldown_steps`, a linear decay: the trapezoidal schedule of Zhai et al. 2022
    and Hägele et al. 2024). With a constant rate a converged model's loss is flat until the
    cool-down, so a curve that still drops there is still learning, not following the schedule.

    `warmup="constant"` is T5X's `rsqrt_decay` (flat at ``lr/√warmup`` during warm-up);
    `warmup="linear"` ramps linearly from ``lr/√warmup / warmup`` to that value over the first
    `warmup_steps` updates. `step` counts updates from 0, so the first update uses step 1.

    With `cooldown_steps` > 0 (and `total_steps`), the rate is also multiplied by a linear ramp
    from 1 to 0 over the last `cooldown_steps` updates (T5X's `linear_decay` factor, applied at
    the end only): the slowly decaying rsqrt rate leaves a gradient-noise floor above the loss a
    model can reach; the cool-down removes it, so short runs end near convergence.

    `cooldown_shape` is the factor's form over the cool-down, with x the share of it done
    (0 → 1): "linear" 1 − x, or "1-sqrt" 1 − √x (Hägele et al. 2024 §3, which found it lower
    than linear at the same length). The rate before the cool-down depends on the step only,
    so a run cooled down from step b of a longer run is the run trained for b + cool-down steps
    (`mnmt.training.branches`).
    """
    if cooldown_steps < 0:
        raise ValueError(f"cooldown_steps must be ≥ 0, got {cooldown_steps}")
    if cooldown_steps and (total_steps is None or cooldown_steps > total_steps):
        raise ValueError(f"cooldown_steps ({cooldown_steps}) needs total_steps ≥ cooldown_steps, "
                         f"got {total_steps}")
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be ≥ 1, got {warmup_steps}")
    if warmup not in ("linear", "constant"):
        raise ValueError(f"warmup must be 'linear' or 'constant', got {warmup!r}")
    if decay not in DECAYS:
        raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}")
    if cooldown_shape not in COOLDOWN_SHAPES:
        raise ValueError(f"cooldown_shape must be one of {COOLDOWN_SHAPES}, got "
                         f"{cooldown_shape!r}")
    lr = float(learning_rate)
    w = float(warmup_steps)

    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        if decay == "rsqrt":
            value = lr * jnp.reciprocal(jnp.sqrt(jnp.maximum(step, w)))
        else:
            value = jnp.full_like(step, lr)
        if warmup == "linear":
            value = value * jnp.minimum(step / w, 1.0)
        if cooldown_steps:
            left = float(total_steps) - jnp.asarray(count, jnp.float32)
            remaining = jnp.clip(left / float(cooldown_steps), 0.0, 1.0)  # 1 − x
            if cooldown_shape == "1-sqrt":
                remaining = 1.0 - jnp.sqrt(1.0 - remaining)
            value = value * remaining
        return value

    return schedule


def schedule_for(config) -> optax.Schedule:
    """The learning-rate schedule of a `TrainConfig` (its rate, warm-up, decay and cool-down)."""
    return rsqrt_schedule(config.learning_rate, config.warmup_steps, config.warmup,
                          total_steps=config.train_steps, cooldown_steps=config.cooldown_steps,
                          decay=config.decay, cooldown_shape=config.cooldown_shape)


def make_optimizer(
    schedule: optax.Schedule, config: OptimizerConfig | None = None
) -> optax.GradientTransformation:
    """Adafactor (optax) driven by `schedule`, optionally preceded by global-norm clipping."""
    config = config or OptimizerConfig()
    adafactor = optax.adafactor(
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
        return adafactor
    if config.max_grad_norm <= 0:
        raise ValueError(f"max_grad_norm must be positive, got {config.max_grad_norm}")
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), adafactor)
