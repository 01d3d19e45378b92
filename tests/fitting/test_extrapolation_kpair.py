"""The report's first section on a K-pair (many-pairs) study, on tables whose truth is known:
the held-out mixtures and the chosen mixture law's leave-largest-size-out backtest judged
against the pooled seed noise of the verification runs.

Before (0183a09) every row of a K-pair study read "not computed": the held-out rows read only
the two-pair held-out section (whose eq. 11 law needs 3 sizes), the larger-size rows only the
joint law (eq. 7, not fitted on K-pair mixtures), and every row's σ_seed only the design's seed
repeats, which a K-pair study measures with its verification runs instead."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fitting.core.seed_noise import FEW_SEEDS
from fitting.data.sampling import dirichlet_mixtures
from fitting.laws.curves.annealing import AnnealingLawFit
from fitting.laws.mixture.compare import compare_mixture_laws
from fitting.laws.mixture.laws import MixtureLawFit
from fitting.laws.mixture.runs import MixtureRuns, mixture_runs
from fitting.report.markdown import Document
from fitting.report.record import Report
from fitting.report.sections.extrapolation import (
    CURVE_LAMBDA,
    FAILS,
    HELDOUT_RUN,
    HOLDS,
    LARGER_SIZE,
    LONGER_RUN,
    NO_NOISE,
    extrapolation_rows,
    extrapolation_section,
)
from fitting.report.sections.mixture import mixture_payload
from fitting.report.sections.verification import verification_seed_noise
from fitting.report.view import prepare_view

PAIRS = ["en-da", "en-es", "en-fi"]
SIZES = [1e7, 4e7]
#: the verification runs' relative offsets per seed: pooled relative seed sd = D exactly
D = 0.004


def _truth(sizes: list[float] = SIZES) -> MixtureLawFit:
    """Fernandes eq. 11 with a transfer matrix, known parameters."""
    tau = np.array([[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1.0]])
    sol = {p: {"theta": [0.3] + list(tau[i, [j for j in range(3) if j != i]]),
               "coef": [0.8, 1.0 + 0.2 * i], "f_scale": 0.01} for i, p in enumerate(PAIRS)}
    return MixtureLawFit(law="mixture", params={}, form="transfer", pairs=PAIRS, sizes=sizes,
                         n_ref=2e7, solutions=sol)


def _tidy(truth: MixtureLawFit, ids: list[str], n: np.ndarray, W: np.ndarray,
          factor: np.ndarray | float = 1.0) -> pd.DataFrame:
    Y = truth.predict(n, W) * factor
    runs = MixtureRuns(PAIRS, ids, n, W, Y, np.full(Y.shape, np.nan), np.zeros(len(n), bool))
    return runs.to_tidy()


def _study(largest_off: float = 1.0, sizes: list[float] = SIZES, design_off: float = 1.0,
           above: float | None = None, small_seeds: float | None = None
           ) -> tuple[pd.DataFrame, list[str], dict]:
    """(table, held-out run ids, verification plan): six design mixtures at every size, two
    held-out mixtures at the smallest and largest size and two verification mixtures × 3 seeds
    (±D) at the largest, all exact; the held-out runs at the largest size × ``largest_off`` and
    the design runs there × ``design_off`` (the law misses them); with ``above``, one more
    held-out run at that size (above every fitted one), × ``largest_off`` too; with
    ``small_seeds`` = e, the held-out runs at the smallest size trained twice, × (1 ± e)."""
    truth = _truth(sizes)
    Wd = np.vstack([np.full((1, 3), 1 / 3), dirichlet_mixtures(3, 5, seed=2, concentration=3.0)])
    Wh = np.array([[0.5, 0.2, 0.3], [0.2, 0.3, 0.5]])
    off = np.where(np.repeat(sizes, len(Wd)) == sizes[-1], design_off, 1.0)[:, None]
    design = _tidy(truth, [f"d{j}_n{n:g}" for n in sizes for j in range(len(Wd))],
                   np.repeat(sizes, len(Wd)), np.tile(Wd, (len(sizes), 1)), off)
    ends = [sizes[0], sizes[-1]]
    held_ids = [f"hold{j}_n{n:g}" for n in ends for j in range(2)]
    held = _tidy(truth, held_ids, np.repeat(ends, 2), np.tile(Wh, (2, 1)),
                 np.array([[1.0], [1.0], [largest_off], [largest_off]]))
    if small_seeds:
        seeds = [_tidy(truth, [f"{r}_s{k}" for r in held_ids[:2]], np.repeat(ends[:1], 2), Wh,
                       1 + sign * small_seeds) for k, sign in enumerate((1, -1))]
        held = pd.concat([*seeds, held[~held["run_id"].isin(held_ids[:2])]])
        held_ids = sorted(set(held["run_id"]))
    if above:
        held_ids.append(f"hold_n{above:g}")
        held = pd.concat([held, _tidy(truth, held_ids[-1:], np.array([above]),
                                      np.array([[0.3, 0.3, 0.4]]), largest_off)])
    Wv = {"uniform": [1 / 3] * 3, "rec": [0.4, 0.4, 0.2]}
    ids = [f"verify-{m}_s{s}" for m in Wv for s in range(3)]
    verify = _tidy(truth, ids, np.full(6, sizes[-1]), np.repeat(list(Wv.values()), 3, axis=0),
                   np.tile([[1 + D], [1.0], [1 - D]], (2, 1)))
    plan = {"size": "n4e7", "seeds": [0, 1, 2],
            "mixtures": {m: dict(zip(PAIRS, w, strict=True)) for m, w in Wv.items()},
            "runs": {rid: rid.split("-")[1].split("_")[0] for rid in ids}}
    return pd.concat([design, held, verify], ignore_index=True), held_ids, plan


def _section(largest_off: float = 1.0, **study) -> tuple[list[dict], dict]:
    """The section's rows and ``fits.json["extrapolation"]`` of :func:`_study`, the mixture
    payload made as the report makes it (one law, no bootstrap: the test's time)."""
    table, held_ids, plan = _study(largest_off, **study)
    view = prepare_view(table, heldout_runs=held_ids, verification=plan)
    cmp = compare_mixture_laws(mixture_runs(view.table, heldout_runs=view.held_ids),
                               forms=("transfer",), n_boot=0)
    noise = verification_seed_noise(view.verify_rows, plan, final=view.verify_final)
    mixture = mixture_payload(cmp, None, noise)
    rep = Report(out_dir="", markdown_path="", html_path="", json_path="")
    return (extrapolation_rows(rep, view, None, None, mixture),
            extrapolation_section(Document(), rep, view, None, None, mixture))


@pytest.fixture(scope="module")
def exact():
    return _section()


def _heldout(rows: list[dict]) -> dict[tuple[str, bool], dict]:
    """{(pair, judged): row} of the held-out rows."""
    return {(r["pair"], r["sigma"] is not None): r for r in rows if r["kind"] == HELDOUT_RUN}


def test_heldout_mixtures_of_an_exact_law_hold_against_the_pooled_seed_noise(exact):
    rows = _heldout(exact[0])
    assert set(rows) == {(p, j) for p in PAIRS for j in (True, False)}
    for pair in PAIRS:
        judged = rows[(pair, True)]
        assert judged["sigma"] == pytest.approx(D, rel=1e-6)  # the verification runs' σ
        assert judged["n_points"] == 2 and "N = 4e+07" in judged["detail"]
        assert judged["law"] == "transfer mixture law"
        assert judged["rmse"] < 3 * D and judged["verdict"] == HOLDS
        small = rows[(pair, False)]  # no seed noise at the smaller size: information
        assert small["n_points"] == 2 and small["verdict"] == NO_NOISE
        assert "N = 1e+07" in small["detail"]


def test_heldout_mixtures_five_percent_off_the_law_do_not_hold(exact):
    rows = _heldout(_section(largest_off=1.05)[0])
    for pair in PAIRS:
        judged = rows[(pair, True)]
        assert judged["rmse"] == pytest.approx(0.05 / 1.05, rel=0.1)
        assert judged["verdict"] == FAILS
        # the smaller size's entries are the exact law's, as before
        assert rows[(pair, False)]["rmse"] == pytest.approx(
            _heldout(exact[0])[(pair, False)]["rmse"], abs=1e-9)


def test_two_sizes_say_why_no_larger_size_is_backtested(exact):
    rows = [r for r in exact[0] if r["kind"] == LARGER_SIZE]
    assert [r["pair"] for r in rows] == PAIRS
    for r in rows:
        assert r["n_points"] == 0 and r["sigma"] == pytest.approx(D, rel=1e-6)
        assert r["law"] == "transfer mixture law"
        assert r["verdict"].startswith("not computed: 2 fitted model size(s) (N = 1e+07, 4e+07)")
        assert "needs at least 3" in r["verdict"]


def test_three_sizes_backtest_the_mixture_law_at_the_largest():
    """With a third size the chosen mixture law, refitted on the two smaller, predicts every
    design mixture at the largest: exact, it holds against the pooled seed noise; with the
    largest size's losses 5 % above the law, it does not."""
    three = [1e7, 2e7, 4e7]
    for off, verdict in ((1.0, HOLDS), (1.05, FAILS)):
        rows = {r["pair"]: r for r in _section(sizes=three, design_off=off)[0]
                if r["kind"] == LARGER_SIZE}
        assert list(rows) == PAIRS
        for r in rows.values():
            assert r["n_points"] == 6 and r["sigma"] == pytest.approx(D, rel=1e-6)
            assert "without N = 4e+07" in r["detail"] and r["verdict"] == verdict
            if off == 1.0:
                assert r["rmse"] < 1e-3
            else:
                assert r["rmse"] > 0.03


def test_statement_counts_the_judged_rows(exact):
    statement = exact[1]["statements"][HELDOUT_RUN]
    assert statement.startswith("Predictions of unseen runs (size and weight): within the "
                                "noise where judged")


def test_with_two_sizes_a_heldout_run_above_them_is_the_larger_size_prediction():
    """No backtest with 2 sizes, but a held-out run at 2× the largest fitted size is a
    prediction at a larger size: its error is the row's, information without seed noise there
    (the verification runs measured it at 4e7 only); 5 % off the law, the error says so."""
    for off in (1.0, 1.05):
        rows = {r["pair"]: r for r in _section(largest_off=off, above=8e7)[0]
                if r["kind"] == LARGER_SIZE}
        for r in rows.values():
            assert r["n_points"] == 1 and r["verdict"] == NO_NOISE
            assert "N = 8e+07, above every fitted size" in r["detail"]
            assert "needs at least 3" in r["detail"]
            assert r["rmse"] == pytest.approx(0.0 if off == 1.0 else 0.05 / 1.05, abs=2e-3)


# -- the longer-run rows from per-pair training losses of a K-pair table ------------------------

#: per pair, an exact LR-annealing law (Tissue et al. eq. 1) at the backtest's λ
PAIR_TRUTH = {p: AnnealingLawFit(law="lr_annealing", lam=CURVE_LAMBDA,
                                 params={"L0": 1.0 + 0.1 * i, "A": 1.5, "alpha": 0.6, "C": 0.05})
              for i, p in enumerate(PAIRS)}


def _rate(s: np.ndarray, end: int, share: float) -> np.ndarray:
    """A 100-step warm-up, rsqrt decay, a linear cool-down to 0 over ``share`` of the run."""
    base = 0.2 * np.minimum(s / 100, 1.0) / np.sqrt(np.maximum(s, 100))
    return base * np.clip((end - s) / (share * end), 0.0, 1.0)


def _curves_study(off: float = 0.0) -> tuple[pd.DataFrame, dict]:
    """Three mixtures of one seed (no design repeat: no σ_seed of the design), each cooling
    down over the last 50 % or 40 % of 1,000 steps (begun before the cut at 2/3), logging every
    pair's training loss and the rate every 10 steps (the pair's exact law × (1 + 0.5 % ε)
    per step, × (1 + off) after 2/3 of the run); verification runs (two mixtures × 3 seeds at
    ±D) for σ_seed."""
    rng = np.random.default_rng(11)
    rows = []
    mixtures = (([0.5, 0.3, 0.2], 0.5), ([0.2, 0.3, 0.5], 0.4), ([0.3, 0.4, 0.3], 0.5))
    for m, (w, share) in enumerate(mixtures):
        steps = np.arange(0, 1001, 10.0)
        eta = _rate(steps, 1000, share)
        base = {"run_id": f"m{m}", "n": SIZES[-1], "seed": 0}
        rows += [{**base, "pair": "all", "weight": np.nan, "eval_set": "train",
                  "metric": "learning_rate", "step": s, "value": v}
                 for s, v in zip(steps, eta, strict=True)]
        for p, wp in zip(PAIRS, w, strict=True):
            loss = PAIR_TRUTH[p].predict(steps[1:], steps, eta) * (
                1 + 5e-3 * rng.standard_normal(steps.size - 1))
            loss = np.where(steps[1:] > 2000 / 3, loss * (1 + off), loss)
            rows += [{**base, "pair": p, "weight": wp, "eval_set": "train",
                      "metric": "train_loss", "step": s, "value": v}
                     for s, v in zip(steps[1:], loss, strict=True)]
            rows.append({**base, "pair": p, "weight": wp, "eval_set": "validation",
                         "metric": "loss", "step": 1000.0, "value": loss[-1], "final": True})
    table = pd.DataFrame(rows).fillna({"final": False})
    study, _, plan = _study()
    verify = study[study["run_id"].isin(plan["runs"])]
    return pd.concat([table, verify], ignore_index=True), plan


def test_longer_run_rows_of_a_kpair_table_are_judged_against_the_per_point_scatter():
    """Every pair's training loss after 2/3 of each run, predicted by the law fitted per
    mixture before the cut, judged against the per-point scatter (0.5 %) of the fitted steps —
    not the verification runs' pooled σ of a final loss (D). 5 % off in the last third, every
    pair fails. Exact, two pairs hold; en-fi's fit (three one-seed mixtures) carries its 0.5 %
    scatter into a 1.9 % error after the cut and fails: the rule judges the points' scatter,
    not the fit's own extrapolated uncertainty (tests/fitting/test_verdict_simulations.py
    measures how often an exact law passes)."""
    for off in (0.0, 0.05):
        table, plan = _curves_study(off)
        rows = {r["pair"]: r for r in extrapolation_rows(
            Report(out_dir="", markdown_path="", html_path="", json_path=""),
            prepare_view(table, verification=plan), None) if r["kind"] == LONGER_RUN}
        assert list(rows) == PAIRS
        for r in rows.values():
            assert 4e-3 < r["sigma"] < 7e-3 and "per-point scatter" in r["sigma_source"]
            assert r["sigma"] != pytest.approx(D)
            assert r["n_points"] == 3 * 34 and "training loss" in r["detail"]  # steps 670–1000
            assert (r["rmse"] < 0.02) if off == 0.0 else (r["rmse"] > 0.04)
        held = sorted(p for p, r in rows.items() if r["verdict"] == HOLDS)
        assert held == (["en-da", "en-es"] if off == 0.0 else [])
        assert all(r["verdict"] in (HOLDS, FAILS) for r in rows.values())


def test_heldout_mixtures_with_their_own_seeds_are_judged_against_their_spread():
    """Held-out mixtures trained with two seeds at a size the verification runs did not measure
    are judged against their own seeds' spread (the mixture section's ``seed spread``), beside
    the entries judged against the pooled noise: one row per pair, no information row. A σ that
    rests partly on two seeds (1 dof) does not judge: the verdict is information (before: holds,
    commit db559dc)."""
    e = D / np.sqrt(2)  # their spread: sd of y(1 ± e) = √2 e y ≈ D y
    rows = _heldout(_section(small_seeds=e)[0])
    assert set(rows) == {(p, True) for p in PAIRS}
    for pair in PAIRS:
        r = rows[(pair, True)]
        assert r["n_points"] == 6 and "N = 1e+07, 4e+07" in r["detail"]
        assert r["sigma_source"] == "pooled seed sd; seed spread (section Mixture laws for K pairs)"
        assert r["sigma"] == pytest.approx(D, rel=0.02)
        assert r["rmse"] == pytest.approx(e * np.sqrt(4 / 6), rel=0.05)  # 4 of 6 off by ±e
        assert r["sigma_dof"] == 1 and r["verdict"].startswith(FEW_SEEDS)
