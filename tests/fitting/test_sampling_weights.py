"""Temperature weights (Chen §4.2) and Caillaut §3.1 oversampling."""

import math

import numpy as np
import pytest

from fitting.data.sampling import (
    oversampling_sizes,
    oversampling_weights,
    proportional_weights,
    temperature_weights,
)

CHEN_4DIR = [10.0, 4.6, 0.26, 0.26]  # Fr, De, Zh, Hi (millions), Chen §4.1


def test_chen_worked_example_T5():
    w = temperature_weights(CHEN_4DIR, 5)
    np.testing.assert_allclose(w, [0.355, 0.304, 0.171, 0.171], atol=6e-4)
    assert w.sum() == pytest.approx(1.0)


def test_temperature_limits():
    sizes = [10.0, 4.6, 0.26]
    np.testing.assert_allclose(temperature_weights(sizes, 1), np.array(sizes) / sum(sizes))
    np.testing.assert_allclose(temperature_weights(sizes, math.inf), [1 / 3] * 3)
    # large T approaches uniform, monotonically flattening
    w100 = temperature_weights(sizes, 100)
    w10 = temperature_weights(sizes, 10)
    assert w100.max() - w100.min() < w10.max() - w10.min()
    np.testing.assert_allclose(proportional_weights(sizes), temperature_weights(sizes, 1))


def test_temperature_from_definition_and_mapping_order():
    sizes = {"en-fr": 7.0, "en-de": 3.0, "en-hi": 0.0}
    w = temperature_weights(sizes, 2)
    p = np.array([0.7, 0.3])
    expected = np.sqrt(p) / np.sqrt(p).sum()
    np.testing.assert_allclose(w[:2], expected)
    assert w[2] == 0.0  # an empty dataset is never sampled


@pytest.mark.parametrize(
    "bad, msg",
    [
        ([1.0, -2.0], r"sizes\[1\].*non-negative"),
        ([1.0, float("nan")], r"sizes\[1\].*finite"),
        ([0, 0, 0], "all dataset sizes are zero"),
        ([], "at least one"),
        (["a", 1], r"sizes\[0\]"),
        ({"en-de": 1.0, "en-hi": -1}, r"sizes\['en-hi'\]"),
    ],
)
def test_bad_sizes(bad, msg):
    with pytest.raises(ValueError, match=msg):
        temperature_weights(bad, 5)
    with pytest.raises(ValueError, match=msg):
        oversampling_weights(bad, 5)


@pytest.mark.parametrize("T", [0, -1, float("nan"), "x"])
def test_bad_temperature(T):
    with pytest.raises(ValueError, match="T"):
        temperature_weights([1, 2], T)


def test_caillaut_oversampling_sizes():
    n = np.array([1000, 100, 10])
    t = 5
    k = oversampling_sizes(n, t)
    p = n / n.sum()
    f = p ** (1 / t)
    expected = np.floor(f * n.max() / f.max())
    np.testing.assert_array_equal(k, expected)
    assert k[0] == 1000  # the largest dataset keeps its size
    assert np.all(k >= n)  # every other one is oversampled
    # without the floor the probabilities equal temperature weights
    np.testing.assert_allclose(
        oversampling_weights(n, t, floor=False), temperature_weights(n, t)
    )
    w = oversampling_weights(n, t)
    np.testing.assert_allclose(w, k / k.sum())


def test_caillaut_per_domain():
    # general: two big datasets; finance: two small ones. Per-domain application oversamples
    # finance relative to its own largest dataset, not to the general domain's.
    sizes = {"de-gen": 40e6, "fr-gen": 20e6, "de-fin": 1e6, "fr-fin": 0.25e6}
    groups = {"de-gen": "general", "fr-gen": "general", "de-fin": "finance", "fr-fin": "finance"}
    k = oversampling_sizes(sizes, 5, groups=groups)
    k_gen = oversampling_sizes([40e6, 20e6], 5)
    k_fin = oversampling_sizes([1e6, 0.25e6], 5)
    np.testing.assert_array_equal(k, np.concatenate([k_gen, k_fin]))
    assert k[2] == 1e6  # the largest finance set keeps its size (not raised to 40M)
    k_joint = oversampling_sizes(sizes, 5)
    assert k_joint[2] > k[2]  # pooled application would oversample finance far more
    w = oversampling_weights(list(sizes.values()), 5, groups=list(groups.values()))
    np.testing.assert_allclose(w, k / k.sum())


def test_groups_validation():
    with pytest.raises(ValueError, match="one label per dataset"):
        oversampling_sizes([1, 2, 3], 5, groups=["a", "b"])
    with pytest.raises(ValueError, match="no group given"):
        oversampling_sizes({"a": 1, "b": 2}, 5, groups={"a": "g"})
    with pytest.raises(ValueError, match="floor"):
        oversampling_weights([0.2, 0.1], 5)  # sizes in fractional units floor to 0
