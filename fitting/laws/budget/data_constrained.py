"""Muennighoff et al. 2023's data-constrained law L(N, D, U): repeated tokens are worth less.

Training D tokens drawn from U unique ones repeats the data R_D = D/U − 1 times; repeated data
decays in value with a half-life-like constant τ_D, so the effective data is
D′ = U + τ_D·U·(1 − exp(−R_D/τ_D)); parameters beyond what the unique data can use
(U_N = min(ρ·U, N), R_N = N/U_N − 1) decay the same way with τ_N into N′. The loss is then
Chinchilla's form in the effective quantities with one exponent: L = A/N′^α + B/D′^α + C.
Temperature sampling that upsamples a small language pair repeats its data exactly like this,
so this is the law for a low-resource pair's budget.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DATA_CONSTRAINED_PARAMS", "DATA_CONSTRAINED_BOUNDS", "data_constrained_loss"]

#: Parameter order of :func:`data_constrained_loss`.
DATA_CONSTRAINED_PARAMS = ("A", "tau_N", "B", "tau_D", "alpha", "C", "rho")
#: A box of plausible values for language-model-scale runs (Li et al. 2026's benchmark).
DATA_CONSTRAINED_BOUNDS = ((1e-3, 1e7), (1e-3, 500), (1e-3, 1e7), (1e-3, 500), (0.05, 2.0),
                           (-3, 10), (1e-3, 100))

_TINY = 1e-12


def _effective(unique: np.ndarray, repeats: np.ndarray, tau) -> np.ndarray:
    """U + τ·U·(1 − exp(−R/τ)): the value of ``unique`` seen ``repeats`` more times."""
    return np.maximum(unique + tau * unique * (1.0 - np.exp(-repeats / tau)), _TINY)


def data_constrained_loss(theta, unique, params, tokens) -> np.ndarray:
    """L(N, D, U) = A/N′^α + B/D′^α + C with N′, D′ the effective parameters and data.

    ``theta`` is (7,) or (7, b, 1) for a batch of b parameter vectors (then the result is (b, n)).
    """
    A, tau_n, B, tau_d, alpha, C, rho = np.asarray(theta, float)
    U = np.maximum(np.asarray(unique, float), _TINY)
    N = np.asarray(params, float)
    D = np.asarray(tokens, float)
    d_eff = _effective(U, D / U - 1.0, tau_d)
    u_n = np.maximum(np.minimum(rho * U, N), _TINY)
    n_eff = _effective(u_n, np.maximum(N / u_n - 1.0, 0.0), tau_n)
    return A / n_eff**alpha + B / d_eff**alpha + C
