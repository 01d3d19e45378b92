"""How much a run would teach about a target: linearised Fisher information of a parametric law.

Around the current fit (normalised parameters u), a run x informs the law through its Jacobian
J(x) = ∂f(x)/∂u (k outputs × p). The observed runs and a prior box give the information
M = Σ J(x)ᵀJ(x)/σ² + 12·I (u uniform on [0, 1] has variance 1/12), and a target t's predictive
variance is g(t) M⁻¹ g(t)ᵀ. Adding run c changes M by J(c)ᵀJ(c)/σ²; Woodbury's identity gives
the drop in the summed target variance and in log det M without refactoring M per candidate.
"""

from __future__ import annotations

import numpy as np

from fitting.design.parametric import ParametricLaw

__all__ = ["jacobian", "fisher_information", "target_variance", "variance_reduction", "logdet_gain",
           "PRIOR_PRECISION"]

#: Prior precision of a normalised parameter: the variance of U(0, 1) is 1/12.
PRIOR_PRECISION = 12.0


def _inverse(matrix: np.ndarray) -> np.ndarray:
    """Inverse of a symmetric positive (semi-)definite matrix, robust to near-singularity."""
    return np.linalg.pinv(np.nan_to_num(matrix, posinf=1e300, neginf=-1e300), hermitian=True)


def jacobian(law: ParametricLaw, u: np.ndarray, X: np.ndarray) -> np.ndarray:
    """∂ predictions / ∂u at every row of ``X``: shape (n, k, p)."""
    return law.jacobian_u(u, X)


def fisher_information(jac_observed: np.ndarray, sigma2: float) -> np.ndarray:
    """M = Σ JᵀJ/σ² + prior, from the observed runs' Jacobians (n, k, p)."""
    p = jac_observed.shape[-1]
    flat = jac_observed.reshape(-1, p)
    return flat.T @ flat / sigma2 + PRIOR_PRECISION * np.eye(p)


def target_variance(info: np.ndarray, jac_target: np.ndarray) -> np.ndarray:
    """Predictive variance g M⁻¹ gᵀ of every target output: shape (n_target, k)."""
    p = info.shape[0]
    g = jac_target.reshape(-1, p)
    sol = _inverse(info) @ g.T
    return np.sum(g * sol.T, axis=1).reshape(jac_target.shape[:2])


def variance_reduction(info: np.ndarray, jac_candidates: np.ndarray, jac_target: np.ndarray,
                       sigma2: float) -> np.ndarray:
    """Drop in the mean target variance if each candidate (m, k, p) were added alone."""
    p = info.shape[0]
    g = jac_target.reshape(-1, p)
    inv = _inverse(info)
    out = np.empty(len(jac_candidates))
    for i, jc in enumerate(jac_candidates):
        w = jc @ inv                                  # (k, p)
        s = sigma2 * np.eye(len(jc)) + w @ jc.T       # (k, k)
        gw = g @ w.T                                  # (t, k)
        out[i] = np.sum(gw * (_inverse(s) @ gw.T).T) / len(g)
    return out


def logdet_gain(info: np.ndarray, jac_candidates: np.ndarray, sigma2: float) -> np.ndarray:
    """Gain in log det M if each candidate were added alone (D-optimality)."""
    inv = _inverse(info)
    out = np.empty(len(jac_candidates))
    for i, jc in enumerate(jac_candidates):
        s = np.eye(len(jc)) + jc @ inv @ jc.T / sigma2
        out[i] = np.linalg.slogdet(s)[1]
    return out
