"""The seed spread in the report (Ghorbani et al. 2021 App. C): how far the final loss of one
experiment moves between its seeds (:func:`fitting.data.seeds.seed_spread`), the noise floor
below which no fit's residuals can go. Which runs are seeds of one experiment, and the seed means
every fit uses: :mod:`fitting.data.seeds`.
"""

from __future__ import annotations

from fitting.report.markdown import Document, format_number

__all__ = ["seeds_section"]


def seeds_section(doc: Document, spread: dict, *, max_rows: int = 12) -> None:
    """The seed spread of :func:`fitting.data.seeds.seed_spread` in the report; nothing when no run was repeated."""
    if not spread.get("n_repeated"):
        return
    doc.h(2, "Seeds (Ghorbani App. C)")
    k, lo, hi = spread["n_repeated"], spread["seeds_min"], spread["seeds_max"]
    doc.p(f"{k} of {spread['n_groups']} experiments (pair, size, weight, mixture) were trained "
          f"with several seeds ({lo if lo == hi else f'{lo}–{hi}'} each). Standard deviation of "
          f"the final loss across seeds: median {spread['sd_median']:.3g} nats "
          f"({spread['rel_sd_median']:.2%} of the loss), largest {spread['sd_max']:.3g}. Every fit "
          "of this report uses the seed mean of each experiment (one point each); the spread is "
          "the noise floor below which no fit's residuals can go. The quality laws use every "
          "(loss, metric) point, seeds included.")
    rows = sorted(spread["groups"], key=lambda g: -g["sd"])[:max_rows]
    doc.table(["pair", "N", "p", "mixture", "seeds", "mean loss", "sd"],
              [[g["pair"], format_number(g["n"]), format_number(g["weight"], digits=3),
                g["mixture"] or g.get("weights") or "–", str(g["seeds"]),
                format_number(g["mean"]), format_number(g["sd"], digits=2)] for g in rows])
    if len(spread["groups"]) > max_rows:
        doc.p(f"(the {max_rows} experiments with the largest spread of {len(spread['groups'])})")
