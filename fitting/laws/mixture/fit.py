"""The K-pair mixture analysis, by job (this module re-exports the public names of each):

* :mod:`fitting.laws.mixture.runs` — runs as arrays from tidy or wide tables
  (:class:`MixtureRuns`, :func:`mixture_runs`, :func:`read_wide_runs`);
* :mod:`fitting.laws.mixture.domain` — the losses no law describes (:func:`outside_domain`);
* :mod:`fitting.laws.mixture.compare` — the laws compared by cross-validation and held-out
  error, the choice, the transfer matrix (:func:`compare_mixture_laws`,
  :func:`transfer_matrix`);
* :mod:`fitting.laws.mixture.recommend` — constrained weights at a target size
  (:func:`recommend_mixture`);
* :mod:`fitting.laws.mixture.baselines` — uniform, temperature and UniMax baselines.

The laws themselves: :mod:`fitting.laws.mixture.laws`.
"""

from __future__ import annotations

from fitting.laws.mixture.baselines import TEMPERATURES
from fitting.laws.mixture.compare import MixtureComparison, compare_mixture_laws, transfer_matrix
from fitting.laws.mixture.domain import outside_domain
from fitting.laws.mixture.recommend import recommend_mixture
from fitting.laws.mixture.runs import MixtureRuns, mixture_runs, read_wide_runs

__all__ = ["MixtureRuns", "mixture_runs", "read_wide_runs", "MixtureComparison", "outside_domain",
           "compare_mixture_laws", "transfer_matrix", "recommend_mixture", "TEMPERATURES"]
