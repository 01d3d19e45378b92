"""How much a measured seed noise σ_seed can be trusted: its seeds, degrees of freedom and
90 % confidence interval — the one rule the report applies to every σ it judges against.

A seed sd on ``dof`` degrees of freedom (k − 1 for k seeds; the pooled variance rule sums them
over experiments, :func:`pooled_sd`) has the χ² interval of :func:`sigma_ci90`. A σ on fewer
than :data:`MIN_DOF` dof (fewer than 3 seeds) does not judge (:func:`judges`; the verdict is
information, :func:`few_seeds_verdict`), and "within 3σ" takes its multiple from σ's dof
(:func:`judging_multiple`: 3, or Student's t at :data:`T_LEVEL` where wider). The derivation and
the simulations behind the multiple: docs/reference/laws.md, "Seed noise". Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from scipy import stats

__all__ = ["MIN_DOF", "FEW_SEEDS", "CI_LEVEL", "SeedNoise", "sigma_ci90", "pooled_sd", "judges",
           "judging_multiple", "T_LEVEL",
           "few_seeds_verdict", "noise_fields"]

#: the fewest degrees of freedom a σ_seed judges on (3 seeds of one experiment)
MIN_DOF = 2
#: how every verdict of :func:`few_seeds_verdict` begins
FEW_SEEDS = "information: seed noise"
#: the confidence level of :func:`sigma_ci90`
CI_LEVEL = 0.90
#: the two-sided level of the t quantile :func:`judging_multiple` widens 3σ to on few dof
T_LEVEL = 0.96


def sigma_ci90(sigma: float, dof: int) -> tuple[float, float]:
    """The 90 % confidence interval of a seed sd ``sigma`` on ``dof`` degrees of freedom from
    the χ² distribution: [σ·sqrt(dof/χ²_{0.95,dof}), σ·sqrt(dof/χ²_{0.05,dof})]. Raises
    ValueError for ``dof`` < 1 (no interval without a degree of freedom)."""
    if dof < 1:
        raise ValueError(f"a seed sd needs at least 1 degree of freedom, got {dof}")
    tail = (1.0 - CI_LEVEL) / 2.0
    return (float(sigma * math.sqrt(dof / stats.chi2.ppf(1.0 - tail, dof))),
            float(sigma * math.sqrt(dof / stats.chi2.ppf(tail, dof))))


def judging_multiple(dof: float | None, base: float = 3.0) -> float:
    """The multiple of a measured σ a verdict judges with: ``base`` (3σ), or Student's t
    two-sided :data:`T_LEVEL` quantile on σ's ``dof`` where that is larger (module docstring);
    ``base`` where the dof is not known or infinite."""
    if dof is None or not math.isfinite(float(dof)) or dof < 1:
        return float(base)
    return max(float(base), float(stats.t.ppf(0.5 + T_LEVEL / 2, float(dof))))


def judges(dof: int | None) -> bool:
    """Whether a σ_seed on ``dof`` degrees of freedom may judge a prediction (≥
    :data:`MIN_DOF`); None (not known) does not."""
    return dof is not None and dof >= MIN_DOF


def few_seeds_verdict(seeds: int | None, dof: int | None) -> str:
    """The verdict where σ_seed rests on too few seeds to judge: information, with its seeds
    and degrees of freedom."""
    if dof is None:
        return f"{FEW_SEEDS} of unknown degrees of freedom"
    runs = "?" if seeds is None else str(seeds)
    return f"{FEW_SEEDS} from {runs} seeds ({dof} dof; at least {MIN_DOF} needed to judge)"


@dataclass(frozen=True)
class SeedNoise:
    """A measured seed sd: ``sigma`` (relative to the loss, or in nats — as its user states),
    the ``seeds`` (runs) it was measured on, its ``dof`` and where it comes from."""

    sigma: float
    seeds: int
    dof: int
    source: str = ""

    @property
    def ci90(self) -> tuple[float, float]:
        """:func:`sigma_ci90` of this estimate."""
        return sigma_ci90(self.sigma, self.dof)

    @property
    def judges(self) -> bool:
        """:func:`judges` on its dof."""
        return judges(self.dof)

    def scaled(self, factor: float, source: str | None = None) -> SeedNoise:
        """The same estimate times ``factor`` (e.g. a relative sd times a measured loss)."""
        return SeedNoise(self.sigma * factor, self.seeds, self.dof,
                         self.source if source is None else source)


def pooled_sd(groups: Iterable[tuple[float, int]], source: str = "") -> SeedNoise | None:
    """The pooled variance rule over ``groups`` of (sd, seeds) — each the ddof-1 sd of one
    experiment's seeds: s² = Σ (k − 1) s² / Σ (k − 1) on Σ (k − 1) dof, ``seeds`` = Σ k.
    Groups with fewer than 2 seeds or a non-finite sd add nothing; None when none is left."""
    ss = 0.0
    dof = seeds = 0
    for sd, k in groups:
        if k >= 2 and math.isfinite(sd):
            ss += (k - 1) * sd * sd
            dof += k - 1
            seeds += k
    if dof == 0:
        return None
    return SeedNoise(math.sqrt(ss / dof), seeds, dof, source)


def noise_fields(seeds: int | None, dof: int | None, sigma: float | None,
                 prefix: str = "sigma") -> dict[str, Any]:
    """The fields a judged row carries about its σ: ``<prefix>_seeds``, ``<prefix>_dof`` and
    ``<prefix>_ci90`` ([low, high] of :func:`sigma_ci90`; None without σ or dof)."""
    ci = (None if sigma is None or dof is None or dof < 1 or not math.isfinite(sigma)
          else list(sigma_ci90(sigma, dof)))
    return {f"{prefix}_seeds": seeds, f"{prefix}_dof": dof, f"{prefix}_ci90": ci}
