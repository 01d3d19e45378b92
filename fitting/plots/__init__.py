"""Figures in the style of the papers' (matplotlib ``Figure`` objects, no pyplot state;
matplotlib is imported when a figure is drawn).

* :mod:`fitting.plots.style` ``new_figure``, ``save``, log-scale ticks, colours, legends
* :mod:`fitting.plots.study` the Fernandes figures: fits per weight, reducible loss,
  coefficients, joint law, f(p), frontiers; learning curves; Ghorbani's Fig. 6 penalty
* :mod:`fitting.plots.laws`  the figures of the Chen, Caillaut and Ghorbani report sections, and
  f(p) of several studies side by side
* :mod:`fitting.plots.curves` training curves with a curve law's continuations and cool-down ends
* :mod:`fitting.plots.mixture` the mixture laws' transfer matrix as a heat map

Every name is available from ``fitting.plots`` itself (``plots.save``, ``plots.plot_joint``):
the report calls figures through this namespace, so a test can wrap ``plots.save``.
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["new_figure", "save", "log_scale", "value_colors", "legend"], "style"),
    **dict.fromkeys(["plot_power_fits", "plot_reducible", "plot_coefficients", "plot_joint",
                     "plot_fraction", "plot_frontier", "plot_learning_curves",
                     "plot_allocation_penalty", "plot_frontier_kpair"], "study"),
    **dict.fromkeys(["plot_dpl_curves", "plot_chinchilla_contours", "plot_bivariate_slices",
                     "plot_fraction_panels"], "laws"),
    "plot_curve_continuations": "curves",
    "plot_transfer_matrix": "mixture",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
