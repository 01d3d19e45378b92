"""Farseer's L(N, D): a Chinchilla-like law whose every term may bend with model size.

L(N, D) = exp(s·N^q + S) + exp(B·N^b + Q) · D^(−exp(A·N^a + E)): the data-independent floor, the
data term's scale and its exponent are each a smooth function of N instead of a constant, which
lets one law follow curves whose data exponent drifts with size (Li et al. 2026's benchmark uses
it as its L(N, D) task). Exponent arguments are clipped at ±50 so that a poor start cannot
overflow.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FARSEER_PARAMS", "FARSEER_BOUNDS", "farseer_loss"]

#: Parameter order of :func:`farseer_loss`.
FARSEER_PARAMS = ("E", "s", "q", "S", "B", "b", "Q", "A", "a")
#: A box of plausible values for language-model-scale runs (the benchmark's own).
FARSEER_BOUNDS = ((1.0, 6.0), (-1.0, 0.3), (0.01, 0.5), (-1.0, 1.0), (10.0, 1000.0),
                  (-0.6, -0.01), (-5.0, 1.0), (-5.0, 1.0), (0.001, 0.25))

_CLIP = 50.0


def farseer_loss(theta, params, tokens) -> np.ndarray:
    """The loss of a model of ``params`` parameters trained on ``tokens`` tokens.

    ``theta`` is (9,) or (9, b, 1) for a batch of b parameter vectors (then the result is (b, n)).
    """
    E, s, q, S, B, b, Q, A, a = np.asarray(theta, float)
    N = np.maximum(np.asarray(params, float), 1e-12)
    log_d = np.log(np.maximum(np.asarray(tokens, float), 1e-12))
    floor = np.exp(np.clip(s * N**q + S, -_CLIP, _CLIP))
    exponent = np.exp(np.clip(A * N**a + E, -_CLIP, _CLIP))
    data = np.exp(np.clip(B * N**b + Q - exponent * log_d, -_CLIP, _CLIP))
    return floor + data
