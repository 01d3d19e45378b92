"""fitting.plots: a panel without points says so instead of warning into the main job's output."""

import warnings

import numpy as np

from fitting import plots


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_a_pair_without_points_draws_a_note_and_no_warning():
    n = np.array([1e4, 3e4, 1e5])
    data = {"en-de": {1.0: (n, 0.2 + 5.0 * n ** -0.5)}, "en-zh": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found" included
        power = plots.plot_power_fits(data, {})
        reducible = plots.plot_reducible(data, {"en-de": 0.2, "en-zh": 0.2})
    for fig in (power, reducible):
        de, zh = fig.axes[:2]
        assert de.get_legend() is not None and zh.get_legend() is None
        assert _texts(fig) == ["no points to plot"]
