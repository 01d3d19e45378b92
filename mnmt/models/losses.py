"""Token-level cross-entropy with label smoothing and z-loss (T5X's loss conventions).

Per token: ce = −Σ_v q_v log softmax(z)_v with q the (optionally smoothed) target distribution,
minus the entropy of q so a perfect prediction scores 0; z-loss = z_loss · log(Σ_v e^{z_v})²
(PaLM/T5X auxiliary loss that keeps the softmax normaliser near 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def cross_entropy_terms(logits: Array, targets: Array, *, label_smoothing: float = 0.0,
                        z_loss: float = 0.0) -> tuple[Array, Array, Array]:
    """Per-token (training loss, pure cross-entropy, z-loss term), each [batch, length] float32.

    `pure cross-entropy` has no smoothing and no z-loss: −log p(target).
    """
    logits = logits.astype(jnp.float32)
    vocab = logits.shape[-1]
    log_z = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    nll = log_z - target_logit
    if label_smoothing > 0.0:
        confidence = 1.0 - label_smoothing
        low = label_smoothing / (vocab - 1)
        normalizer = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low + 1e-20))
        mean_logit = jnp.mean(logits, axis=-1)
        # −Σ q log p with q = low everywhere and confidence at the target
        smoothed = (confidence - low) * nll + low * vocab * (log_z - mean_logit)
        loss = smoothed - normalizer
    else:
        loss = nll
    zterm = z_loss * jnp.square(log_z) if z_loss > 0.0 else jnp.zeros_like(log_z)
    return loss + zterm, nll, zterm
