"""fitting.test_utils.check_figure: each check finds the problem it is for, and passes a clean
figure; the fitting.plots figures it flagged once (crowded log ticks, a β band below zero on a
log axis, an f̂ curve setting the scale) stay fixed."""

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from fitting import plots
from fitting.test_utils import LINEAR_SPAN_FACTOR, check_figure


def _axes(ncols: int = 1):
    fig = Figure(figsize=(4.2 * ncols, 3.4))
    return fig, fig.subplots(1, ncols, squeeze=False)[0]


def _one_problem(fig, *words: str) -> str:
    problems = check_figure(fig, "f.png")
    assert len(problems) == 1, problems
    assert problems[0].startswith("f.png: panel 1"), problems
    for word in words:
        assert word in problems[0], problems
    return problems[0]


def test_a_clean_figure_has_no_problems():
    fig, (ax, ax2) = _axes(2)
    x = np.linspace(1.0, 2.0, 20)
    ax.plot(x, x**2, label="a")
    ax.scatter(x, x**2 + 0.1, label="b")
    ax.fill_between(x, x**2 - 0.1, x**2 + 0.1, alpha=0.2)
    ax.errorbar(x[:3], x[:3], yerr=0.05, fmt="o")
    ax.axhline(2.0)
    ax.legend()
    ax2.text(0.5, 0.5, "no points to plot", transform=ax2.transAxes)
    assert check_figure(fig, "f.png") == []


@pytest.mark.parametrize("draw", [
    lambda ax: ax.plot([1.0, 2.0, 3.0], [1.0, np.nan, 2.0]),
    lambda ax: ax.plot([1.0, 2.0, 3.0], [1.0, np.inf, 2.0]),
    lambda ax: ax.scatter([1.0, 2.0, 3.0], [1.0, np.nan, 2.0]),
    lambda ax: ax.add_collection(PolyCollection([[(1, 1), (2, 1), (2, np.inf)], [(1, 2), (2, 2), (2, 3)]])),
], ids=["nan-line", "inf-line", "nan-scatter", "inf-polygon"])
def test_non_finite_data_is_reported(draw):
    fig, (ax,) = _axes()
    draw(ax)
    ax.autoscale_view()
    _one_problem(fig, "not finite", "1 of")


def test_a_band_with_non_finite_bounds_is_reported():
    # matplotlib leaves the non-finite stretch out of the polygon: the band comes in pieces
    fig, (ax,) = _axes()
    x = np.linspace(0.0, 1.0, 9)
    ax.plot(x, x)
    ax.fill_between(x, x - 0.1, np.where(x == 0.5, np.nan, x + 0.1))
    _one_problem(fig, "band is in 2 pieces")


def test_missing_error_bars_are_reported():
    fig, (ax,) = _axes()
    ax.errorbar([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], yerr=[0.1, np.nan, 0.1], fmt="o", label="en-de")
    _one_problem(fig, "error bars of series 'en-de'", "1 of 3 are missing")


def test_an_axis_at_1e180_for_data_near_1_is_reported():
    fig, (ax,) = _axes()
    ax.plot([1.0, 1.5, 2.0], [0.9, 1.0, 1.1])
    ax.set_ylim(0.0, 1e180)
    _one_problem(fig, "y axis shows [0, 1e+180]", f"at most {LINEAR_SPAN_FACTOR:g}×")


def test_a_log_axis_at_1e180_for_data_near_1_is_reported():
    fig, (ax,) = _axes()
    ax.plot([1.0, 1.5, 2.0], [0.9, 1.0, 1.1])
    ax.set_yscale("log")
    ax.set_ylim(0.5, 1e180)
    _one_problem(fig, "y axis (log)", "more than a factor 10")


def test_a_few_runaway_points_that_set_the_scale_are_reported():
    # a law evaluated where it diverges: 3 of 100 points at 1e6 stretch the autoscaled axis
    fig, (ax,) = _axes()
    x = np.linspace(0.0, 1.0, 100)
    ax.plot(x, np.where(x < 0.03, 1e6, 1.0 + x))
    _one_problem(fig, "y axis shows")


def test_a_view_that_misses_the_data_is_reported():
    fig, (ax,) = _axes()
    ax.plot([1.0, 2.0], [1.0, 2.0])
    ax.set_xlim(5.0, 6.0)
    _one_problem(fig, "x axis shows [5, 6], none of the plotted values")


def test_values_at_or_below_zero_on_a_log_axis_are_reported():
    fig, (ax,) = _axes()
    ax.plot([1.0, 2.0, 3.0], [1.0, -0.5, 2.0])
    ax.set_yscale("log")
    _one_problem(fig, "1 of 3 plotted values are ≤ 0 and not drawn")


def test_two_labelled_lines_without_a_legend_are_reported():
    fig, (ax,) = _axes()
    ax.plot([1.0, 2.0], [1.0, 2.0], label="en-de")
    ax.plot([1.0, 2.0], [2.0, 1.0], label="en-zh")
    _one_problem(fig, "2 labelled series (en-de, en-zh) but no legend")
    ax.legend()
    assert check_figure(fig) == []


def test_a_colorbar_explains_labelled_series_as_a_legend_does():
    fig, (ax,) = _axes()
    ax.scatter([1.0, 2.0], [1.0, 2.0], s=6, color="0.8", label="dominated")
    sc = ax.scatter([1.5, 2.5], [1.0, 2.0], c=[0.0, 1.0], label="Pareto-efficient")
    assert "no legend" in check_figure(fig)[0]
    fig.colorbar(sc, ax=ax)
    assert check_figure(fig) == []  # the colorbar's own axes are not a panel


def test_overlapping_tick_labels_are_reported():
    fig, (ax,) = _axes()
    ax.plot([0.0, 1.0], [0.0, 1.0])
    ax.set_xticks(np.linspace(0.0, 1.0, 41))
    assert "x tick labels" in _one_problem(fig, "overlap")


def test_an_empty_panel_without_a_note_is_reported():
    fig, (ax, ax2) = _axes(2)
    ax2.plot([1.0, 2.0], [1.0, 2.0])
    _one_problem(fig, "nothing is drawn")


# --- the fitting.plots figures ---------------------------------------------------------------

N = np.array([9.46e3, 2.1e4, 3.73e4, 5.81e4])  # the `ci` preset's sizes: less than a decade


class _Fit:
    def predict(self, n):
        return 0.3 + 40.0 * np.asarray(n) ** -0.6


def test_a_log_axis_under_a_decade_has_labels_that_do_not_overlap():
    # matplotlib's own labels there ("2×10⁴", "3×10⁴", "4×10⁴") overlap: the check sees it
    fig, (ax,) = _axes()
    ax.scatter(N, _Fit().predict(N))
    ax.set_xscale("log")
    assert any("tick labels" in p for p in check_figure(fig))
    data = {"en-de": {0.5: (N, _Fit().predict(N))}}
    for fig in (plots.plot_power_fits(data, {"en-de": {0.5: _Fit()}}),
                plots.plot_reducible(data, {"en-de": 0.3}),
                plots.plot_joint(data, lambda pair, p, n: _Fit().predict(n), ["en-de"])):
        assert check_figure(fig) == []
    labels = [t.get_text() for t in fig.axes[0].xaxis.get_ticklabels(which="both") if t.get_text()]
    assert "20k" in labels and "10k" in labels


def test_a_beta_band_wider_than_beta_stays_on_the_log_axis():
    ps = [0.1, 0.3, 0.5, 0.7, 0.9]
    beta = [80.0, 60.0, 60.0, 55.0, 140.0]
    sd = [20.0, 100.0, 240.0, np.nan, 400.0]  # sd > β: β − sd < 0; one weight without sd
    coefs = {"en-zh": {p: ({"alpha": 0.4, "beta": b, "l_inf": 1.5},
                           {"alpha": 0.05, "beta": s, "l_inf": 0.02})
                       for p, b, s in zip(ps, beta, sd, strict=True)}}
    fig = plots.plot_coefficients(coefs)
    assert check_figure(fig) == []
    lo, hi = fig.axes[1].get_ylim()
    assert lo > 0 and min(beta) / 5 <= lo and hi <= max(beta) * 5


def test_a_runaway_f_hat_curve_does_not_set_the_fraction_scale():
    points = {"en-de": {0.1: (0.12, 0.02), 0.5: (0.55, 0.03), 1.0: (1.0, np.nan)}}
    fig = plots.plot_fraction(points, {"en-de": lambda p: 1e6 * p**2})
    assert check_figure(fig) == []
    lo, hi = fig.axes[0].get_ylim()
    assert -0.1 < lo <= 0.0 and 1.0 <= hi < 1.2


def test_a_densely_sampled_series_does_not_outweigh_a_sparse_one():
    """A frontier sampled at 400 weights, nearly all of them in its corner, beside 8 measured
    runs around it: the view that shows the runs is right, however few of the plotted points
    they are; a view 30× wider than both series is still reported."""
    fig, (ax,) = _axes()
    p = np.linspace(0.0, 1.0, 400)
    ax.plot(73.5 - 8.0 * p**40, 77.0 - 8.0 * (1 - p) ** 40, ls="--", label="frontier")
    rng = np.random.default_rng(0)
    ax.scatter(rng.uniform(72, 79, 8), rng.uniform(72, 78, 8), label="runs")
    ax.set_xlim(71.0, 80.0)
    ax.set_ylim(71.0, 79.0)
    ax.legend()
    assert check_figure(fig, "f.png") == []
    ax.set_ylim(0.0, 240.0)
    _one_problem(fig, "y axis shows [0, 240]")
