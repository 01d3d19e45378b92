"""The training loss between two log steps, over all pairs and per pair (`train_loss` rows).

Each step adds its target-token sums (`mnmt.training.step_functions.token_sums`: Σ −log p, no
label smoothing, no z-loss, and the target tokens, over the batch and per pair, from the step's
own forward pass). At a log step the rows are the token-weighted means over the window W of
steps since the last one:

    train_loss(all)  = Σ_{s∈W} Σ_t nll_t / Σ_{s∈W} N_s
    train_loss(pair) = Σ_{s∈W} Σ_{t∈pair} nll_t / Σ_{s∈W} N_{s,pair}

so `all` is the token-weighted mean of the pairs' values, and each is the per-target-token
cross-entropy of the `loss` rows, measured on the training batches. A pair without target
tokens in the window (weight 0: never drawn) has no value. The window is saved with every
checkpoint (`state`, meta `train_loss_window`), so a resumed run writes the rows an
uninterrupted one writes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["LossWindow"]


@dataclasses.dataclass
class LossWindow:
    """Σ −log p and target tokens since the last `train_loss` rows, in all and per pair."""

    cross_entropy_sum: float = 0.0
    tokens: int = 0
    pairs: dict[str, list] = dataclasses.field(default_factory=dict)  # pair -> [Σ nll, tokens]

    def add(self, metrics: Mapping[str, Any], pair_names: Sequence[str]) -> None:
        """Add one step's metrics (one run's); `pair_names[k]` is the pair of task id k + 1."""
        self.cross_entropy_sum += float(metrics["cross_entropy_sum"])
        self.tokens += int(metrics["num_tokens"])
        if "pair_cross_entropy_sum" not in metrics:
            return
        sums = np.asarray(metrics["pair_cross_entropy_sum"], np.float64)
        counts = np.asarray(metrics["pair_num_tokens"], np.int64)
        if np.any(counts[len(pair_names):]):
            # a grouped step sums as many pairs as its largest mixture: the rest stay empty
            raise ValueError(f"step metrics count tokens of task ids past this run's "
                             f"{len(pair_names)} pairs {list(pair_names)}: {counts.tolist()}")
        for name, total, n in zip(pair_names, sums, counts, strict=False):
            if n > 0:
                acc = self.pairs.setdefault(name, [0.0, 0])
                acc[0] += float(total)
                acc[1] += int(n)

    def means(self) -> dict[str, float]:
        """task -> mean per-target-token cross-entropy: `all`, then each pair that had tokens
        (sorted by name); `all` is NaN for a window without tokens."""
        out = {"all": self.cross_entropy_sum / self.tokens if self.tokens else math.nan}
        out.update({p: s / n for p, (s, n) in sorted(self.pairs.items())})
        return out

    def state(self) -> dict[str, Any]:
        """JSON-serialisable window (checkpoint meta `train_loss_window`)."""
        return {"cross_entropy_sum": self.cross_entropy_sum, "tokens": self.tokens,
                "pairs": {p: [s, n] for p, (s, n) in sorted(self.pairs.items())}}

    @classmethod
    def from_state(cls, saved: Any) -> LossWindow:
        """The window of a checkpoint's `state()`. A checkpoint written before the window was
        per token and per pair holds `[Σ step losses, steps]`, which cannot be turned into
        token sums: the window then starts empty (the first row after the resume averages the
        steps trained since)."""
        if not isinstance(saved, Mapping):
            return cls()
        return cls(float(saved["cross_entropy_sum"]), int(saved["tokens"]),
                   {str(p): [float(s), int(n)] for p, (s, n) in saved["pairs"].items()})
