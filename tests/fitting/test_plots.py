"""fitting.plots: a panel without points says so instead of warning into the main job's output."""

import warnings

import numpy as np
import pytest

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


def test_frontier_axes_cover_the_compared_range_not_the_exploding_ends():
    p = np.linspace(0.001, 0.999, 200)
    a = 0.2 + 0.01 / p ** 3  # eq. 11 near p = 0: the loss of the starved pair grows without bound
    b = 0.15 + 0.01 / (1 - p) ** 3
    observed = {1e5: (np.array([0.22, 0.25]), np.array([0.18, 0.16]))}
    fig = plots.plot_frontier({1e5: (a, b), 4e5: (a - 0.01, b - 0.01)}, ["en-de", "en-zh"],
                              observed=observed)
    ax = fig.axes[0]
    assert max(a) > 1e6  # the curve itself explodes at its ends
    # from the best value on the curves to the worst observed run, a quarter of that beyond each
    best, worst = float(min(a - 0.01)), 0.25
    lo, hi = ax.get_xlim()
    assert lo == pytest.approx(best - 0.25 * (worst - best))
    assert hi == pytest.approx(worst + 0.25 * (worst - best))
    best, worst = float(min(b - 0.01)), 0.18
    lo, hi = ax.get_ylim()
    assert lo == pytest.approx(best - 0.25 * (worst - best))
    assert hi == pytest.approx(worst + 0.25 * (worst - best))
    # a higher-is-better metric (ChrF): from the best value down to the worst run, mirrored
    chrf = plots.plot_frontier({1e5: (60 - 10 * a, 55 - 10 * b)}, ["en-de", "en-zh"],
                               observed={1e5: (np.array([56.0, 55.0]), np.array([52.0, 53.0]))},
                               metric="chrf")
    best = float(max(60 - 10 * a))
    lo, hi = chrf.axes[0].get_xlim()
    assert lo == pytest.approx(55.0 - 0.25 * (best - 55.0))
    assert hi == pytest.approx(best + 0.25 * (best - 55.0))


def _png_pixels(path) -> np.ndarray:
    from PIL import Image  # matplotlib's own dependency

    with Image.open(path) as image:
        return np.asarray(image.convert("RGBA"))


def test_save_crops_to_what_is_drawn_as_a_tight_savefig_does(tmp_path):
    import matplotlib

    fig, axes = plots.new_figure(ncols=2)
    for ax in axes.ravel():
        ax.plot([1, 2, 3], [3, 1, 2])
        ax.set_xlabel("x label")
    ax.set_title("a title on the right panel only")  # top-right ink: a flipped crop differs
    canvas, dpi = fig.canvas, fig.get_dpi()
    with matplotlib.rc_context({"image.origin": "lower"}):  # must not turn the image over
        path = plots.save(fig, str(tmp_path / "sub" / "fig.png"), dpi=80)
    fig.savefig(tmp_path / "tight.png", dpi=80, bbox_inches="tight", pad_inches=0.06)
    ours, tight = _png_pixels(path), _png_pixels(tmp_path / "tight.png")
    assert abs(ours.shape[0] - tight.shape[0]) <= 1 and abs(ours.shape[1] - tight.shape[1]) <= 1
    height, width = min(ours.shape[0], tight.shape[0]), min(ours.shape[1], tight.shape[1])
    ink = [(a[:height, :width, :3] < 128).any(axis=2) for a in (ours, tight)]
    for rows in (0, 1):  # where the ink is, per row and per column, within a pixel or two
        profile = [i.mean(axis=1 - rows) for i in ink]
        shifted = min(np.abs(np.roll(profile[0], k) - profile[1]).mean() for k in (-2, -1, 0, 1, 2))
        assert shifted < 0.015, (rows, shifted)  # measured 0.001-0.009; turned over: 0.028
    assert ours.shape[1] < fig.get_size_inches()[0] * 80  # cropped: the right margin held nothing
    assert fig.get_dpi() == dpi and fig.canvas is canvas  # the figure is left as it was


def test_save_keeps_a_label_pushed_off_the_canvas(tmp_path):
    fig, axes = plots.new_figure()
    ax = axes[0, 0]
    ax.plot([0, 1], [0, 1e9])
    ax.set_yticks([0, 1e9], ["a very long tick label indeed", "another very long one"])
    ax.set_ylabel("y label")
    assert fig.get_tightbbox().x0 < 0  # the label starts left of the canvas
    width = _png_pixels(plots.save(fig, str(tmp_path / "fig.png"), dpi=80)).shape[1]
    assert width > fig.get_size_inches()[0] * 80  # the image grew to hold it, nothing cut
