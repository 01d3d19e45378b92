"""The rsqrt schedule, the Adafactor / AdamW / clipping setup and OptimizerConfig's checks
(mnmt.training.optimizer, mnmt.training.config); other schedules: test_schedules.py."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mnmt.training.optimizer import OptimizerConfig, make_optimizer, rsqrt_schedule


def test_rsqrt_constant_warmup_is_t5x_rsqrt_decay():
    sched = rsqrt_schedule(1.0, warmup_steps=100, warmup="constant")
    # T5X: lr = 1/sqrt(max(step, warmup)); our count 0 is the first update (step 1).
    assert float(sched(0)) == pytest.approx(0.1)
    assert float(sched(99)) == pytest.approx(0.1)
    assert float(sched(399)) == pytest.approx(1 / 20)
    assert float(sched(9999)) == pytest.approx(1 / 100)


def test_rsqrt_linear_warmup_ramps_then_decays():
    sched = rsqrt_schedule(2.0, warmup_steps=10, warmup="linear")
    values = np.array([float(sched(i)) for i in range(40)])
    peak = 2.0 / np.sqrt(10)
    assert values[0] == pytest.approx(peak / 10)
    assert values[9] == pytest.approx(peak)
    assert np.all(np.diff(values[:10]) > 0)
    assert np.all(np.diff(values[9:]) < 0)
    assert values[39] == pytest.approx(2.0 / np.sqrt(40))


def test_cooldown_ramps_the_rate_linearly_to_zero_at_the_end():
    plain = rsqrt_schedule(1.0, warmup_steps=10, warmup="constant")
    cooled = rsqrt_schedule(1.0, warmup_steps=10, warmup="constant", total_steps=100,
                            cooldown_steps=20)
    assert float(cooled(79)) == pytest.approx(float(plain(79)))  # before the cool-down: rsqrt
    # count 80 is update 81: 20 updates left of 20 -> full rate; then linear to 0 at the end
    assert float(cooled(90)) == pytest.approx(float(plain(90)) * 10 / 20)
    assert float(cooled(99)) == pytest.approx(float(plain(99)) * 1 / 20)
    assert float(cooled(100)) == 0.0
    with pytest.raises(ValueError, match="cooldown_steps"):
        rsqrt_schedule(1.0, 10, cooldown_steps=5)  # no total_steps


def test_constant_decay_holds_the_rate_until_the_cooldown():
    sched = rsqrt_schedule(0.05, warmup_steps=10, warmup="linear", total_steps=100,
                           cooldown_steps=20, decay="constant")
    values = np.array([float(sched(i)) for i in range(101)])
    assert values[0] == pytest.approx(0.005)  # linear warm-up from lr / warmup_steps
    assert np.all(np.diff(values[:10]) > 0)
    np.testing.assert_allclose(values[9:80], 0.05)  # stable phase: the rate itself, no rsqrt
    assert values[90] == pytest.approx(0.05 * 10 / 20)
    assert values[100] == 0.0
    with pytest.raises(ValueError, match="decay"):
        rsqrt_schedule(1.0, 10, decay="linear")


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        rsqrt_schedule(1.0, 0)
    with pytest.raises(ValueError, match="warmup"):
        rsqrt_schedule(1.0, 10, warmup="cosine")


def test_adafactor_factors_large_matrices_only():
    tx = make_optimizer(rsqrt_schedule(1.0, 10))
    params = {"big": jnp.ones((256, 128)), "small": jnp.ones((8, 4)), "vec": jnp.ones((300,))}
    state = tx.init(params)
    shapes = sorted({tuple(x.shape) for x in jax.tree.leaves(state)})
    # factored second moments of "big" have shape (256,) and (128,): no full 256x128 slot
    assert (256,) in shapes and (128,) in shapes
    assert (256, 128) not in shapes
    assert (8, 4) in shapes  # unfactored slot for the small matrix


def test_global_norm_clipping_bounds_the_gradient_seen_by_adafactor():
    huge = {"w": jnp.full((4, 4), 1e6)}
    params = {"w": jnp.zeros((4, 4))}
    # With max_grad_norm the update is identical for a huge and a unit-norm gradient of the
    # same direction (clipping happens before Adafactor's own scale-invariant normalisation),
    # and the clip transform is actually present.
    tx = make_optimizer(lambda _: 1.0, OptimizerConfig(max_grad_norm=1.0))
    assert isinstance(tx, optax.GradientTransformation)
    st = tx.init(params)
    clipped, _ = tx.update(huge, st, params)
    unit = {"w": jnp.full((4, 4), 0.25)}  # global norm 1
    ref, _ = tx.update(unit, tx.init(params), params)
    np.testing.assert_allclose(clipped["w"], ref["w"], rtol=1e-5)
    with pytest.raises(ValueError, match="max_grad_norm"):
        make_optimizer(lambda _: 1.0, OptimizerConfig(max_grad_norm=0.0))


def test_adafactor_decreases_a_quadratic():
    tx = make_optimizer(rsqrt_schedule(1.0, 5, "constant"),
                        OptimizerConfig(multiply_by_parameter_scale=False))
    params = {"w": jnp.full((3,), 5.0)}
    state = tx.init(params)
    loss = lambda p: jnp.sum(p["w"] ** 2)  # noqa: E731
    start = float(loss(params))
    for _ in range(50):
        g = jax.grad(loss)(params)
        upd, state = tx.update(g, state, params)
        params = optax.apply_updates(params, upd)
    assert float(loss(params)) < 0.5 * start


def _adam_reference(theta, grads, lr, b1, b2, eps, wd, decayed):
    """Adam with bias correction (Kingma & Ba 2015, Alg. 1) and decoupled weight decay
    (Loshchilov & Hutter 2019, Alg. 2, with η_t = lr), written out in numpy step by step."""
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        theta = theta - lr * (m_hat / (np.sqrt(v_hat) + eps) + (wd * theta if decayed else 0.0))
    return theta


def test_adamw_matches_hand_computed_adam_steps_with_decay_on_matrices_only():
    config = OptimizerConfig(name="adamw", b1=0.8, b2=0.9, adam_eps=1e-3, weight_decay=0.5)
    tx = make_optimizer(lambda _: 0.1, config)
    target = {"w": jnp.array([[1.0, -2.0], [0.5, 3.0]]), "scale": jnp.array([2.0, -1.0, 0.0])}
    params = {"w": jnp.ones((2, 2)), "scale": jnp.ones((3,))}
    start = {k: np.asarray(v, np.float64) for k, v in params.items()}
    loss = lambda p: 0.5 * sum(jnp.sum((p[k] - target[k]) ** 2) for k in p)  # noqa: E731
    state, seen = tx.init(params), {"w": [], "scale": []}
    for _ in range(3):
        g = jax.grad(loss)(params)
        for k in seen:
            seen[k].append(np.asarray(g[k], np.float64))
        upd, state = tx.update(g, state, params)
        params = optax.apply_updates(params, upd)
    for name, decayed in (("w", True), ("scale", False)):  # 1-D scales are not decayed
        expected = _adam_reference(start[name], seen[name], 0.1, 0.8, 0.9, 1e-3, 0.5, decayed)
        np.testing.assert_allclose(np.asarray(params[name]), expected, rtol=1e-5, atol=1e-6)
    assert float(loss(params)) < float(loss({k: jnp.asarray(v) for k, v in start.items()}))


def test_adamw_clips_the_gradient_when_max_grad_norm_is_set():
    params = {"w": jnp.zeros((2, 2))}
    tx = make_optimizer(lambda _: 1.0, OptimizerConfig(name="adamw", max_grad_norm=1.0))
    huge, unit = {"w": jnp.full((2, 2), 1e6)}, {"w": jnp.full((2, 2), 0.5)}  # unit: norm 1
    # Adam's first step is sign-like either way; the second moments show the clipped gradient.
    _, state = tx.update(huge, tx.init(params), params)
    _, ref = tx.update(unit, tx.init(params), params)
    for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)
    mu = [x for x in jax.tree.leaves(state) if np.shape(x) == (2, 2)][0]
    np.testing.assert_allclose(np.asarray(mu), 0.1 * 0.5, rtol=1e-5)  # (1 − b1) · clipped g


def test_optimizer_config_rejects_bad_fields_naming_them():
    with pytest.raises(ValueError, match=r"OptimizerConfig.name: .*'adamm'.*did you mean 'adamw'"):
        OptimizerConfig(name="adamm")
    bad = {"b1": 1.0, "b2": -0.1, "adam_eps": 0.0, "weight_decay": -1.0}
    for field, value in bad.items():
        with pytest.raises(ValueError, match=rf"OptimizerConfig.{field}: expected"):
            OptimizerConfig(name="adamw", **{field: value})
    with pytest.raises(ValueError, match=r"OptimizerConfig.eps: expected a number > 0"):
        OptimizerConfig(eps=0.0)
    # a setting the chosen optimiser would ignore is refused, not silently dropped
    with pytest.raises(ValueError, match=r"OptimizerConfig.weight_decay: 0.1 is not read by "
                                         r"OptimizerConfig.name='adafactor'"):
        OptimizerConfig(weight_decay=0.1)
    with pytest.raises(ValueError, match=r"OptimizerConfig.momentum: .*'adamw'"):
        OptimizerConfig(name="adamw", momentum=0.9)
    # Adafactor's defaults, as t5x_configs/runs/train.gin binds them, go with AdamW
    assert OptimizerConfig(name="adamw", decay_rate=0.8, clipping_threshold=1.0).name == "adamw"
