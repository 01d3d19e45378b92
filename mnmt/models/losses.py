"""Token-level cross-entropy with label smoothing and z-loss (T5X's loss conventions).

Per token: ce = −Σ_v q_v log softmax(z)_v with q the (optionally smoothed) target distribution,
minus the entropy of q so a perfect prediction scores 0; z-loss = z_loss · log(Σ_v e^{z_v})²
(PaLM/T5X auxiliary loss that keeps the softmax normaliser near 1).

The gradient with respect to the logits is written out by hand (a `jax.custom_vjp`): one fused
pass softmax(z)·c − onehot·a − b/V over the [tokens, vocab] logits, instead of the autodiff graph
(softmax gradient, a scatter of the target gradient into a zeroed [tokens, vocab] array, and the
sums of both). Same values as autodiff to float32 rounding (tests/models/test_losses.py); the
vocabulary-sized work of a training step is the largest non-matmul cost on CPU.

`tiled_cross_entropy_terms` computes the output projection and these terms in `tiles` slices of
the sequence (a `lax.scan` over a rematerialised body, the vocabulary tiling of MaxText's
`num_vocab_tiling`): only one slice's [batch, length/tiles, vocab] logits and their gradient
exist at a time, and the backward pass recomputes each slice's logits from its hidden states (one
more output-projection matmul). Same values and gradients as the untiled path
(tests/models/test_tiled_loss.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def _smoothing_constants(vocab: int, label_smoothing: float) -> tuple[float, float, float]:
    """(a, b, normaliser): loss = a·nll + b·(log Z − mean logit) − normaliser.

    With smoothing ε the target distribution is 1 − ε on the target and ε/(V − 1) elsewhere, so
    −Σ q log p = (1 − ε − ε/(V−1))·nll + ε/(V−1)·V·(log Z − mean logit); the normaliser is its
    entropy, so that predicting q exactly scores 0.
    """
    if label_smoothing <= 0.0:
        return 1.0, 0.0, 0.0
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (vocab - 1)
    normalizer = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low + 1e-20))
    return confidence - low, low * vocab, float(normalizer)


@functools.cache
def _fused_terms(label_smoothing: float, z_loss: float):
    """custom_vjp function (logits f32 [..., V], targets int [...]) -> (loss, nll, zterm)."""

    def forward(logits, targets):
        vocab = logits.shape[-1]
        a, b, normalizer = _smoothing_constants(vocab, label_smoothing)
        log_z = jax.nn.logsumexp(logits, axis=-1)
        target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        nll = log_z - target_logit
        loss = a * nll
        if b:
            loss = loss + b * (log_z - jnp.mean(logits, axis=-1)) - normalizer
        zterm = z_loss * jnp.square(log_z) if z_loss > 0.0 else jnp.zeros_like(log_z)
        return (loss + zterm, nll, zterm), log_z

    @jax.custom_vjp
    def terms(logits, targets):
        return forward(logits, targets)[0]

    def fwd(logits, targets):
        out, log_z = forward(logits, targets)
        return out, (logits, targets, log_z)

    def bwd(res, cotangents):
        logits, targets, log_z = res
        g_loss, g_nll, g_z = cotangents
        vocab = logits.shape[-1]
        a, b, _ = _smoothing_constants(vocab, label_smoothing)
        dz = 2.0 * z_loss * log_z                      # d zterm / d log Z
        # d/dz_v of: loss = a·nll + b·(log Z − mean) + zterm; nll; zterm  (d log Z/dz_v = p_v)
        coef_p = g_loss * (a + b + dz) + g_nll + g_z * dz
        coef_onehot = g_loss * a + g_nll
        p = jnp.exp(logits - log_z[..., None])
        onehot = jnp.arange(vocab, dtype=jnp.int32) == targets[..., None]
        grad = p * coef_p[..., None] - jnp.where(onehot, coef_onehot[..., None], 0.0)
        if b:
            grad = grad - (g_loss * (b / vocab))[..., None]
        return grad, None

    terms.defvjp(fwd, bwd)
    return terms


def cross_entropy_terms(logits: Array, targets: Array, *, label_smoothing: float = 0.0,
                        z_loss: float = 0.0) -> tuple[Array, Array, Array]:
    """Per-token (training loss, pure cross-entropy, z-loss term), each [batch, length] float32.

    `pure cross-entropy` has no smoothing and no z-loss: −log p(target).
    """
    fn = _fused_terms(float(label_smoothing), float(z_loss))
    return fn(logits.astype(jnp.float32), jnp.asarray(targets).astype(jnp.int32))


def argmax_correct(logits: Array, targets: Array) -> Array:
    """1.0 where the arg-max of the logits is the target, else 0.0 (float32, no gradient)."""
    return jax.lax.stop_gradient((jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32))


def tiled_cross_entropy_terms(hidden: Array, kernel: Array, targets: Array,
                              project: Callable[[Array, Array], Array], *, tiles: int,
                              label_smoothing: float = 0.0, z_loss: float = 0.0
                              ) -> tuple[Array, Array, Array, Array]:
    """Per-token (training loss, pure cross-entropy, z-loss term, arg-max correct) [batch, length]
    of the logits `project(hidden, kernel)`, computed `tiles` slices of the length axis at a time.

    `hidden` [batch, length, emb] and `targets` [batch, length]; `project(h, kernel)` maps a slice
    [batch, n, emb] to float32 logits [batch, n, vocab] (the model's output projection, tied or
    untied). The batch axis stays whole in every slice, so its sharding over the `data` mesh axis
    is kept; a length that `tiles` does not divide is padded to a multiple (the padded positions
    are dropped from the result). `tiles=1` is `cross_entropy_terms` of the full logits.
    """
    if not isinstance(tiles, int | np.integer) or tiles < 1:
        raise ValueError(f"loss_tiles must be a positive integer (1 = untiled), got {tiles!r}")
    targets = jnp.asarray(targets).astype(jnp.int32)
    fn = _fused_terms(float(label_smoothing), float(z_loss))

    def one(kernel, h, t):
        logits = project(h, kernel).astype(jnp.float32)
        return (*fn(logits, t), argmax_correct(logits, t))

    if tiles == 1:
        return one(kernel, hidden, targets)
    batch, length = targets.shape
    pad = -length % tiles
    if pad:
        hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
        targets = jnp.pad(targets, ((0, 0), (0, pad)))
    span = (length + pad) // tiles
    # [batch, tiles·span, ...] -> [tiles, batch, span, ...]: the scanned axis is the tile.
    hs = jnp.swapaxes(hidden.reshape(batch, tiles, span, hidden.shape[-1]), 0, 1)
    ts = jnp.swapaxes(targets.reshape(batch, tiles, span), 0, 1)
    body = jax.checkpoint(one)  # the backward pass recomputes a slice's logits, never stores them

    def step(carry, xs):
        return carry, body(kernel, *xs)

    _, outs = jax.lax.scan(step, None, (hs, ts))
    return tuple(jnp.swapaxes(o, 0, 1).reshape(batch, tiles * span)[:, :length] for o in outs)
