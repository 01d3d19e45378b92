"""Where the mixture laws hold: masks of the (run, pair) losses no law describes.

Used by :func:`fitting.laws.mixture.compare.compare_mixture_laws`, which neither fits nor scores
the losses masked here.
"""

from __future__ import annotations

import numpy as np

from fitting.laws.mixture.runs import MixtureRuns

__all__ = ["outside_domain"]


def outside_domain(runs: MixtureRuns, *, budget_examples: float | None = None,
                   epoch_cap: float | None = None) -> dict[str, np.ndarray]:
    """The (run, pair) losses no mixture law describes, as boolean masks (runs × pairs):

    * ``untrained`` — w_i = 0: the pair is evaluated, not trained (a zero-shot loss, several
      times any trained one: Fernandes et al.'s p = 0);
    * ``over epoch cap`` — the pair's own data repeated more than ``epoch_cap`` times,
      w_i · budget / D_i > epoch_cap (needs ``budget_examples`` and the pair's ``data_size``):
      beyond it a low-resource pair over-fits and its loss *rises* with its weight, which no
      law here models (they saturate at best).
    """
    untrained = runs.W <= 0
    over = np.zeros_like(untrained)
    if budget_examples and epoch_cap:
        for i, p in enumerate(runs.pairs):
            if runs.data_size.get(p):
                over[:, i] = runs.W[:, i] * budget_examples / runs.data_size[p] > epoch_cap
    return {"untrained": untrained, "over epoch cap": over & ~untrained}
