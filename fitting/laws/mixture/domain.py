"""Where the mixture laws hold: masks of the (run, pair) losses no law describes.

Used by :func:`fitting.laws.mixture.compare.compare_mixture_laws`, which neither fits nor scores
the losses masked here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fitting.laws.mixture.runs import MixtureRuns

__all__ = ["EpochCap", "outside_domain"]


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
    over = np.zeros_like(untrained)
    if epoch_cap is not None and epoch_cap.budget_examples and epoch_cap.cap:
        for i, p in enumerate(runs.pairs):
            if runs.data_size.get(p):
                over[:, i] = (runs.W[:, i] * epoch_cap.budget_examples / runs.data_size[p]
                              > epoch_cap.cap)
    return {"untrained": untrained, "over epoch cap": over & ~untrained}
