"""The hand-written gradient of the cross-entropy terms equals autodiff of the plain formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mnmt.models.losses import cross_entropy_terms


def reference_terms(logits, targets, label_smoothing, z_loss):
    """The textbook formulas, differentiated by JAX: −Σ q log softmax(z) − H(q) + z·logZ²."""
    vocab = logits.shape[-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    onehot = jax.nn.one_hot(targets, vocab)
    if label_smoothing > 0:
        q = onehot * (1 - label_smoothing) + (1 - onehot) * label_smoothing / (vocab - 1)
        entropy = -jnp.sum(q * jnp.log(q), axis=-1)
    else:
        q, entropy = onehot, 0.0
    nll = -jnp.sum(onehot * logp, axis=-1)
    zterm = z_loss * log_z ** 2
    return -jnp.sum(q * logp, axis=-1) - entropy + zterm, nll, zterm


@pytest.mark.parametrize("label_smoothing,z_loss", [(0.0, 0.0), (0.0, 1e-4), (0.1, 0.0), (0.1, 1e-2)])
def test_values_and_gradients_equal_autodiff_of_the_formulas(label_smoothing, z_loss):
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(0, 3, size=(3, 5, 11)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, 11, size=(3, 5)), jnp.int32)
    # distinct random weights on every output, so each output's cotangent path is exercised
    w = [jnp.asarray(rng.uniform(0.1, 2.0, size=(3, 5)), jnp.float32) for _ in range(3)]

    def objective(fn):
        def f(z):
            loss, nll, zterm = fn(z)
            return jnp.sum(w[0] * loss) + jnp.sum(w[1] * nll) + jnp.sum(w[2] * zterm)
        return f

    ours = lambda z: cross_entropy_terms(z, targets, label_smoothing=label_smoothing,  # noqa: E731
                                         z_loss=z_loss)
    ref = lambda z: reference_terms(z, targets, label_smoothing, z_loss)  # noqa: E731
    for a, b in zip(ours(logits), ref(logits), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    g_ours = jax.grad(objective(ours))(logits)
    g_ref = jax.grad(objective(ref))(logits)
    np.testing.assert_allclose(np.asarray(g_ours), np.asarray(g_ref), rtol=1e-4, atol=1e-6)
    assert float(jnp.max(jnp.abs(g_ref))) > 0.1  # the comparison is not between two zero arrays


def test_gradient_of_the_training_loss_only_under_jit():
    # aux outputs unused (their cotangents are symbolic zeros), as in the training step
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.normal(size=(2, 4, 7)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, 7, size=(2, 4)), jnp.int32)
    f = jax.jit(jax.grad(lambda z: jnp.mean(cross_entropy_terms(z, targets, z_loss=1e-3)[0])))
    g = jax.grad(lambda z: jnp.mean(reference_terms(z, targets, 0.0, 1e-3)[0]))(logits)
    np.testing.assert_allclose(np.asarray(f(logits)), np.asarray(g), rtol=1e-4, atol=1e-7)
