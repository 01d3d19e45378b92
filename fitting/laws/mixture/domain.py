"""Where the mixture laws hold: masks of the (run, pair) losses no law describes.

Used by :func:`fitting.laws.mixture.compare.compare_mixture_laws`, which neither fits nor scores
the losses masked here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fitting.laws.mixture.runs import MixtureRuns

__all__ = ["EpochCap", "outside_domain", "over_epoch_cap"]


@dataclass(frozen=True)
class EpochCap:
    """The epoch cap that bounds the laws' domain: at ``budget_examples`` training examples, a
    pair whose own data is repeated more than ``cap`` times (w_i · budget / D_i > cap) is
    outside it."""

    budget_examples: float
    cap: float


def outside_domain(runs: MixtureRuns, *, epoch_cap: EpochCap | None = None
                   ) -> dict[str, np.ndarray]:
    """The (run, pair) losses no mixture law describes, as boolean masks (runs × pairs):

    * ``untrained`` — w_i = 0: the pair is evaluated, not trained (a zero-shot loss, several
      times any trained one: Fernandes et al.'s p = 0);
    * ``over epoch cap`` — the pair's own data repeated more than ``epoch_cap.cap`` times,
      w_i · budget / D_i > cap (needs an ``epoch_cap`` and the pair's ``data_size``):
      beyond it a low-resource pair over-fits and its loss *rises* with its weight, which no
      law here models (they saturate at best).
    """
    untrained = runs.W <= 0
    over = over_epoch_cap(runs.W, [runs.data_size.get(p) for p in runs.pairs], epoch_cap)
    return {"untrained": untrained, "over epoch cap": over & ~untrained}


def over_epoch_cap(W: np.ndarray, data_sizes: Sequence[float | None],
                   epoch_cap: EpochCap | None) -> np.ndarray:
    """Runs × pairs: the pair's own data repeated more than ``epoch_cap.cap`` times,
    w_i · budget / D_i > cap, for the weights ``W`` (one row per run) and each pair's data
    size D_i (None or 0: uncapped, never over); all False without an ``epoch_cap``."""
    W = np.asarray(W, dtype=float)
    over = np.zeros(W.shape, bool)
    if epoch_cap is not None and epoch_cap.budget_examples and epoch_cap.cap:
        for i, size in enumerate(data_sizes):
            if size:
                over[:, i] = W[:, i] * epoch_cap.budget_examples / size > epoch_cap.cap
    return over
