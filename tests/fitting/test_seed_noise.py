"""fitting.core.seed_noise: the χ² interval of a seed sd, the pooled variance rule, and the
3-seed minimum below which a σ_seed does not judge."""

from __future__ import annotations

import numpy as np
import pytest

from fitting.core.seed_noise import (
    FEW_SEEDS,
    MIN_DOF,
    few_seeds_verdict,
    judges,
    noise_fields,
    pooled_sd,
    sigma_ci90,
)


@pytest.mark.parametrize("seeds", [2, 3, 5])
def test_ci90_contains_the_true_sd_nine_times_in_ten(seeds):
    """Simulated seeds of a known σ: the 90 % interval of their sd holds σ in ≈ 90 % of 4,000
    draws (binomial sd 0.5 %; a rule with the wrong dof or a normal interval misses by more)."""
    rng = np.random.default_rng(seeds)
    sigma = 0.02
    draws = rng.normal(1.0, sigma, size=(4000, seeds))
    sd = draws.std(axis=1, ddof=1)
    inside = [lo <= sigma <= hi for lo, hi in (sigma_ci90(s, seeds - 1) for s in sd)]
    assert np.mean(inside) == pytest.approx(0.90, abs=0.02)


def test_two_seeds_give_the_wide_interval_and_do_not_judge():
    lo, hi = sigma_ci90(1.0, 1)
    assert lo == pytest.approx(0.51, abs=0.01) and hi == pytest.approx(15.95, abs=0.05)
    assert MIN_DOF == 2 and not judges(1) and judges(2) and not judges(None)
    assert few_seeds_verdict(2, 1).startswith(FEW_SEEDS) and "2 seeds (1 dof" in \
        few_seeds_verdict(2, 1)
    with pytest.raises(ValueError, match="at least 1 degree"):
        sigma_ci90(1.0, 0)


def test_pooled_sd_sums_dof_and_weights_variances_by_them():
    """Two experiments, 3 and 2 seeds, sds 0.02 and 0.01: s² = (2·0.02² + 1·0.01²) / 3 on 3 dof;
    a single-seed group and a NaN sd add nothing; nothing left → None."""
    p = pooled_sd([(0.02, 3), (0.01, 2), (0.5, 1), (float("nan"), 4)], source="x")
    assert p.dof == 3 and p.seeds == 5 and p.source == "x"
    assert p.sigma == pytest.approx(np.sqrt((2 * 0.02**2 + 0.01**2) / 3))
    assert p.judges and p.ci90 == pytest.approx(sigma_ci90(p.sigma, 3))
    assert pooled_sd([(0.3, 1)]) is None


def test_noise_fields_of_a_row():
    f = noise_fields(3, 2, 0.01)
    assert f["sigma_seeds"] == 3 and f["sigma_dof"] == 2
    assert f["sigma_ci90"] == pytest.approx(list(sigma_ci90(0.01, 2)))
    assert noise_fields(None, None, None, prefix="noise") == {
        "noise_seeds": None, "noise_dof": None, "noise_ci90": None}


def test_the_judging_multiple_is_three_or_t_where_sigma_has_few_dof():
    from scipy import stats

    from fitting.core.seed_noise import judging_multiple
    assert judging_multiple(2) == pytest.approx(stats.t.ppf(0.98, 2))  # 4.85
    assert judging_multiple(3) == pytest.approx(stats.t.ppf(0.98, 3))  # 3.48
    assert judging_multiple(4) == judging_multiple(None) == judging_multiple(float("inf")) == 3.0
