"""Mixture weights: validation, temperature / oversampling formulas, grids, registration."""

import math

import numpy as np
import pytest

from mnmt.data import mixtures


def test_weights_are_validated_with_clear_errors():
    assert mixtures.validate_weights({"a": 1, "b": 3}) == {"a": 0.25, "b": 0.75}
    with pytest.raises(ValueError, match=r"\['b'\].*>= 0"):
        mixtures.validate_weights({"a": 1, "b": -0.1})
    with pytest.raises(ValueError, match="finite"):
        mixtures.validate_weights({"a": 1, "b": float("nan")})
    with pytest.raises(ValueError, match="all weights are zero"):
        mixtures.validate_weights({"a": 0, "b": 0.0})
    with pytest.raises(ValueError, match="expected a number"):
        mixtures.validate_weights({"a": "heavy"})
    with pytest.raises(ValueError, match="non-empty"):
        mixtures.validate_weights({})


def test_register_mixture_keeps_zero_weight_member_and_rejects_unknown_tasks(tiny_tasks):
    import seqio

    de, zh = tiny_tasks["en-de"], tiny_tasks["en-zh"]
    name = mixtures.register_weighted_mixture("t_zero", {de: 0.0, zh: 2.0})
    mix = seqio.get_mixture_or_task(name)
    assert sorted(t.name for t in mix.tasks) == sorted([de, zh])  # still evaluated
    assert mixtures.mixture_weights(name) == {de: 0.0, zh: 1.0}
    assert mixtures.register_weighted_mixture("t_zero", {de: 0.0, zh: 1.0}) == name  # idempotent
    with pytest.raises(ValueError, match="unknown tasks"):
        mixtures.register_weighted_mixture("t_bad", {de: 0.5, "no_such_task": 0.5})


def test_temperature_mixture_reproduces_chen_worked_example(tiny_tasks):
    """Chen et al. 2023: sizes 10M/4.6M/0.26M/0.26M at T = 5 → 0.355/0.304/0.171/0.171."""
    de, zh = tiny_tasks["en-de"], tiny_tasks["en-zh"]
    # With two tasks at sizes 10M and 0.26M, T = 5: p ∝ n^{1/5}.
    name = mixtures.register_temperature_mixture("t_temp", [de, zh], 5, {de: 10e6, zh: 0.26e6})
    w = mixtures.mixture_weights(name)
    a, b = 10e6 ** 0.2, 0.26e6 ** 0.2
    assert math.isclose(w[de], a / (a + b), rel_tol=1e-12)
    from fitting.data.sampling import temperature_weights

    four = temperature_weights([10e6, 4.6e6, 0.26e6, 0.26e6], 5)
    np.testing.assert_allclose(four, [0.355, 0.304, 0.171, 0.171], atol=1.5e-3)


def test_temperature_needs_sizes_for_unlimited_streams(tiny_tasks):
    with pytest.raises(ValueError, match="unlimited"):
        mixtures.register_temperature_mixture("t_t2", list(tiny_tasks.values()), 2)


def test_oversampling_mixture_uses_caillaut_formula(tiny_tasks):
    de, zh = tiny_tasks["en-de"], tiny_tasks["en-zh"]
    sizes = {de: 1_000_000, zh: 10_000}
    name = mixtures.register_oversampling_mixture("t_over", [de, zh], 2.0, sizes)
    w = mixtures.mixture_weights(name)
    # P = N/ΣN; T = P^{1/t}; k_i = floor(T_i · max N / max T); weights ∝ k
    p = np.array([1e6, 1e4]) / 1.01e6
    tt = p ** 0.5
    k = np.floor(tt * 1e6 / tt.max())
    np.testing.assert_allclose([w[de], w[zh]], k / k.sum(), rtol=1e-9)


def test_two_pair_grid_and_simplex_grid():
    g = mixtures.two_pair_grid("a", "b")
    assert [x["a"] for x in g] == [0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1]
    assert all(math.isclose(x["a"] + x["b"], 1.0) for x in g)
    s = mixtures.simplex_grid(["a", "b", "c"], 0.25)
    assert len(s) == math.comb(4 + 2, 2)  # compositions of 4 into 3 parts
    assert all(math.isclose(sum(x.values()), 1.0) for x in s)
    assert len({tuple(x.values()) for x in s}) == len(s)
    inner = mixtures.simplex_grid(["a", "b", "c"], 0.1, min_weight=0.1)
    assert min(min(x.values()) for x in inner) >= 0.1 - 1e-12 and len(inner) == math.comb(9, 2)
    with pytest.raises(ValueError, match="divide 1"):
        mixtures.simplex_grid(["a", "b"], 0.3)
    with pytest.raises(ValueError, match=r"p in \[0, 1\]"):
        mixtures.two_pair_grid("a", "b", [1.2])


def test_oversampling_per_domain_group(tiny_tasks):
    """Caillaut §3.1 applies the formula separately per domain: a dataset alone in its group
    keeps k_i = N_i, so with one dataset per group the weights are proportional to sizes."""
    de, zh = tiny_tasks["en-de"], tiny_tasks["en-zh"]
    sizes = {de: 900_000, zh: 100_000}
    name = mixtures.register_oversampling_mixture("t_over_g", [de, zh], 5.0, sizes,
                                                  groups={de: "general", zh: "financial"})
    w = mixtures.mixture_weights(name)
    assert w[de] == pytest.approx(0.9) and w[zh] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="no domain"):
        mixtures.register_oversampling_mixture("t_over_g2", [de, zh], 5.0, sizes, groups={de: "g"})
