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


def test_learning_curves_one_panel_per_pair_coloured_by_size_untrained_left_out():
    steps = np.array([200.0, 400.0, 600.0, 800.0, 1000.0])
    curves, panels = {}, {}
    for n in (1e4, 3e4, 1e5):
        for p in (0.0, 0.5, 1.0):
            for pair, w in (("en-de", p), ("en-zh", 1 - p)):
                label = f"N{n:g}_p{p}/{pair}"
                curves[label] = (steps, (12.0 if w == 0 else 0.2 + 50 * n ** -0.5) * steps ** -0.05)
                if w > 0:
                    panels[label] = (pair, n)
    fig = plots.plot_learning_curves(curves, title="compute-limited", panels=panels,
                                     cooldown_step=700.0)
    de, zh = fig.axes
    assert [ax.get_title() for ax in fig.axes] == ["en-de — compute-limited",
                                                   "en-zh — compute-limited"]
    # 3 sizes x 2 trained weights per pair, plus the cool-down marker; the untrained curves
    # (loss ≈ 12) are not drawn, so the axes stay within the trained losses
    assert len(de.lines) == 6 + 1 and len(zh.lines) == 6 + 1
    assert de.get_ylim()[1] < 2.0 and zh.get_ylim()[1] < 2.0
    labels = [t.get_text() for t in de.get_legend().get_texts()]
    assert labels == ["N=1e+04", "N=3e+04", "N=1e+05", "cool-down starts"]
    colours = {tuple(line.get_color()) for line in de.lines[:-1]}
    assert len(colours) == 3  # one colour per size
