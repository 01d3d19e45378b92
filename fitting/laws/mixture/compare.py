"""The mixture laws compared: fitted on the runs not held out, cross-validated over design
mixtures, scored on the held-out runs, one chosen; and the transfer matrix of the eq. 11 law.

* :func:`compare_mixture_laws` — every law of :mod:`fitting.laws.mixture.laws` fitted on the
  runs that are not held out (seed means per design mixture and size), cross-validation over
  design mixtures (:func:`cv_folds`; all sizes of a mixture left out together; each fold
  refitted from the same start grids as the full fit, failed refits counted), errors on the
  held-out runs; the chosen law has the lowest CV mean absolute error, all laws compared on
  one point set (:func:`rank_laws`, the one rule by which laws are ranked; held-out runs never
  choose).
* :func:`size_backtest` — the chosen law's leave-largest-size-out backtest: refitted without
  the largest size, it predicts the seed means there.
* :func:`transfer_matrix` — τ (K×K, diagonal 1) of the ``transfer`` law with bootstrap sd.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.laws.mixture.domain import EpochCap, outside_domain
from fitting.laws.mixture.laws import (
    FORMS,
    MixtureLawFit,
    attach_bootstrap,
    bootstrap_refits,
    bootstrap_resamples,
    budgets,
    fit_mixture_law,
    predict_with,
    refit_mixture_law,
)
from fitting.laws.mixture.runs import MixtureRuns

__all__ = ["MixtureComparison", "compare_mixture_laws", "cv_folds", "choose_law", "rank_laws",
           "transfer_matrix", "size_backtest"]


@dataclass
class MixtureComparison:
    """The laws fitted on the runs that are not held out, their errors, the chosen law.
    ``outside``: {reason: number of (run, pair) losses outside the laws' domain}
    (:func:`outside_domain`), never fitted nor scored. ``cv_predictions[form]``: the law's CV
    predictions of ``cv_targets`` (the seed means fitted; NaN where a fold failed), which
    :func:`rank_laws` reads to rank any subset of the laws. ``size_backtest``: the chosen law's
    (:func:`size_backtest`), None without a chosen law."""

    runs: MixtureRuns
    laws: dict[str, MixtureLawFit]
    errors: dict[str, dict]
    skipped: dict[str, str]
    chosen: str | None
    chosen_because: str
    heldout: dict[str, dict]
    outside: dict[str, int] = field(default_factory=dict)
    cv_predictions: dict[str, np.ndarray] = field(default_factory=dict)
    cv_targets: np.ndarray | None = None
    size_backtest: dict | None = None


def _seed_means(runs: MixtureRuns, rows: np.ndarray):
    """(n, W, Y, mixture label, tokens or None) of ``rows`` averaged over runs with the same
    mixture and size — and token budget, where the budgets differ enough for the laws' D term
    (:func:`~fitting.laws.mixture.laws.budgets`); else seeds of one mixture, whose token counts
    differ by a few tokens, are one point."""
    keys = runs.mixture_keys[rows]
    by_budget = (runs.tokens is not None
                 and budgets(runs.tokens[rows], int(rows.sum()))[0] is not None)
    tok = runs.tokens[rows] if by_budget else np.zeros(int(rows.sum()))
    df = pd.DataFrame({"key": keys, "n": runs.n[rows], "d": tok})
    groups = df.groupby(["key", "n", "d"], sort=False, dropna=False).indices
    n, W, Y, g, d = [], [], [], [], []
    for (key, size, budget), idx in groups.items():
        sel = np.flatnonzero(rows)[idx]
        n.append(size)
        d.append(budget)
        W.append(runs.W[sel[0]])
        with warnings.catch_warnings():  # a pair with no loss at all in the group: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            Y.append(np.nanmean(runs.Y[sel], axis=0) if np.isfinite(runs.Y[sel]).any()
                     else runs.Y[sel[0]])
        g.append(key)
    return (np.array(n), np.array(W), np.array(Y), np.array(g),
            np.array(d, dtype=float) if by_budget else None)


def _errors(y: np.ndarray, pred: np.ndarray) -> dict:
    ok = np.isfinite(y)
    good = ok & np.isfinite(pred)
    if not good.any():
        return {"mae": float("nan"), "mape": float("nan"), "points": 0,
                "not_predicted": int(ok.sum())}
    e = pred[good] - y[good]
    return {"mae": float(np.mean(np.abs(e))), "mape": float(100 * np.mean(np.abs(e) / y[good])),
            "points": int(good.sum()), "not_predicted": int((ok & ~good).sum())}


def _noise(runs: MixtureRuns, r: int, i: int, keys: np.ndarray
           ) -> tuple[float, str, int | None]:
    """Seed spread of run r's mixture at its size and its number of seeds, else the sd of its
    last 3 evaluations (no seeds: None) (``keys``: ``runs.mixture_keys``)."""
    same = (keys == keys[r]) & np.isclose(runs.n, runs.n[r])
    v = runs.Y[same, i]
    v = v[np.isfinite(v)]
    if len(v) >= 2:
        return float(np.std(v, ddof=1)), "seed spread", len(v)
    sd = runs.curve_sd[r, i]
    return (float(sd), "last 3 evaluations", None) if np.isfinite(sd) else (
        float("nan"), "none", None)


def cv_folds(groups: np.ndarray, max_folds: int = 10, seed: int = 0) -> np.ndarray:
    """One fold index per entry of ``groups`` (design-mixture labels): every mixture its own
    fold (leave-one-mixture-out) when there are at most 2 · ``max_folds`` mixtures, else the
    mixtures dealt at random (seeded) into ``max_folds`` folds; all entries of a label share
    its fold (all sizes of a mixture are left out together)."""
    labels, inv = np.unique(np.asarray(groups), return_inverse=True)
    m = len(labels)
    if m <= 2 * max_folds:
        return inv
    order = np.random.default_rng(seed).permutation(m)
    fold_of = np.empty(m, dtype=int)
    fold_of[order] = np.arange(m) % max_folds
    return fold_of[inv]


def _full_fit(form, n, W, Y, pairs, g, d):
    """A process job: the law fitted to all design runs, or the FitError's text."""
    try:
        return fit_mixture_law(form, n, W, Y, pairs, groups=g, n_boot=0, d=d)
    except FitError as e:
        return str(e)


def _fold_fit(fit: MixtureLawFit, n, W, Y, d, train: np.ndarray):
    """A process job: predictions of all rows by the law refitted, from its start grids, to
    ``train``; and the targets whose refit failed."""
    failed: list[str] = []
    dd = None if fit.d_ref is None else d
    sol = refit_mixture_law(fit, n[train], W[train], Y[train], from_grid=True, failed=failed,
                            d=None if dd is None else dd[train])
    return predict_with(fit, sol, n, W, dd), failed


_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def _one_blas_thread():
    """Worker processes started inside this context run BLAS on one thread each: the
    parallelism is the processes' (several BLAS threads per worker oversubscribe the cores, and
    the small SVDs of ``least_squares`` then run tens of times slower)."""
    old = {k: os.environ.get(k) for k in _BLAS_THREADS}
    os.environ.update(dict.fromkeys(_BLAS_THREADS, "1"))
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Jobs:
    """Runs jobs in worker processes (``workers`` > 1) or here, reporting each completion."""

    def __init__(self, workers: int, progress: Callable[[str], None] | None):
        self.workers, self.progress, self.t0 = workers, progress, time.monotonic()

    def map(self, fn, args: list[tuple], what: list[str]) -> list:
        out: list = [None] * len(args)
        if self.workers <= 1 or len(args) <= 1:
            for i, a in enumerate(args):
                out[i] = fn(*a)
                self._say(what[i], i + 1, len(args))
            return out
        with _one_blas_thread():
            ctx = multiprocessing.get_context("forkserver")
            with ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx) as ex:
                futs = {ex.submit(fn, *a): i for i, a in enumerate(args)}
                for done, fut in enumerate(as_completed(futs), 1):
                    out[futs[fut]] = fut.result()
                    self._say(what[futs[fut]], done, len(args))
        return out

    def _say(self, what: str, done: int, total: int) -> None:
        if self.progress:
            self.progress(f"mixture: {what} done ({done}/{total}, "
                          f"{time.monotonic() - self.t0:.0f} s)")


def _default_workers(n_losses: int) -> int:
    """Worker processes: one below 3000 fitted losses (process start-up would dominate)."""
    return 1 if n_losses < 3000 else max(1, min(os.cpu_count() or 1, 8))


def _bootstrap_forms(errors: dict[str, dict], chosen: str | None,
                     laws: dict[str, MixtureLawFit], preds: dict[str, np.ndarray],
                     y: np.ndarray) -> list[str]:
    """The laws whose bootstrap is read: the chosen one (bands), ``transfer`` (τ's sd) and the
    best by CV (:func:`rank_laws` among them) of the laws that predict at any size (the
    recommendation's law when the chosen one cannot reach the target size)."""
    out = [f for f in (chosen, "transfer") if f in laws]
    sized = [f for f in laws if laws[f].sized and f != "datamixing"]
    return list(dict.fromkeys(out + rank_laws(errors, preds, y, sized)[0][:1]))


def compare_mixture_laws(runs: MixtureRuns, *, forms: tuple[str, ...] = FORMS, n_boot: int = 100,
                         seed: int = 0, min_mixtures: int | None = None,
                         epoch_cap: EpochCap | None = None, max_folds: int = 10,
                         workers: int | None = None,
                         progress: Callable[[str], None] | None = None) -> MixtureComparison:
    """Fit every law in ``forms`` to the runs not held out; CV and held-out errors; the choice.

    Cross-validation over design mixtures (:func:`cv_folds`: leave-one-mixture-out, or
    ``max_folds`` folds when there are many); every fold refitted from the same start grids as
    the full fit; a target whose fold refit fails leaves its points unpredicted and is counted
    (``cv_failed``). ``n_boot`` bootstrap resamples for the laws whose bands are read
    (:func:`_bootstrap_forms`); failed refits dropped and counted (``boot_failed``).
    ``workers`` processes (default: one for small tables, else the CPU count up to 8);
    ``progress`` receives a line per finished fit. Losses outside the laws' domain
    (:func:`outside_domain` under ``epoch_cap``) are neither fitted nor scored. Raises FitError
    when fewer than
    ``min_mixtures`` (default K + 2) distinct design mixtures are left to fit.
    """
    masks = outside_domain(runs, epoch_cap=epoch_cap)
    outside = {why: int(m[np.isfinite(runs.Y)].sum()) for why, m in masks.items()}
    Y_in = np.where(np.logical_or.reduce(list(masks.values())), np.nan, runs.Y)
    all_runs, runs = runs, replace(runs, Y=Y_in)
    n, W, Y, g, d = _seed_means(runs, ~runs.heldout)
    k = len(runs.pairs)
    need = k + 2 if min_mixtures is None else min_mixtures
    if len(np.unique(g)) < need:
        raise FitError(f"{len(np.unique(g))} distinct design mixtures to fit for {k} pairs; the "
                       f"mixture laws need at least {need} (K + 2)", column="weight")
    jobs = _Jobs(_default_workers(int(np.isfinite(Y).sum())) if workers is None else workers,
                 progress)
    fits = jobs.map(_full_fit, [(f, n, W, Y, runs.pairs, g, d) for f in forms],
                    [f"{f} fit" for f in forms])
    laws = {f: r for f, r in zip(forms, fits, strict=True) if not isinstance(r, str)}
    skipped = {f: r for f, r in zip(forms, fits, strict=True) if isinstance(r, str)}
    fold = cv_folds(g, max_folds, seed)
    nf = int(fold.max()) + 1
    cv_kind = "leave-one-mixture-out" if nf == len(np.unique(g)) else f"{nf}-fold over mixtures"
    todo = [(f, j) for f in laws for j in range(nf)]
    res = jobs.map(_fold_fit, [(laws[f], n, W, Y, d, fold != j) for f, j in todo],
                   [f"{f} CV fold {j + 1}/{nf}" for f, j in todo])
    errors, preds = {}, {}
    for form, fit in laws.items():
        pred, failed = np.full(Y.shape, np.nan), 0
        for (f, j), (p, fl) in zip(todo, res, strict=True):
            if f == form:
                pred[fold == j] = p[fold == j]
                failed += len(fl)
        errors[form] = _law_errors(fit, runs, Y, pred, cv_kind, nf, failed)
        preds[form] = pred
    chosen, because = choose_law(errors, preds, Y, cv_kind)
    if n_boot:
        _bootstrap_laws(jobs, [laws[f] for f in _bootstrap_forms(errors, chosen, laws, preds, Y)],
                        n, W, Y, g, d, n_boot, seed, errors)
    heldout = _heldout_table(runs, laws.get(chosen) if chosen else None, chosen)
    return MixtureComparison(all_runs, laws, errors, skipped, chosen, because, heldout, outside,
                             cv_predictions=preds, cv_targets=Y,
                             size_backtest=size_backtest(laws[chosen], n, W, Y, d)
                             if chosen else None)


def size_backtest(fit: MixtureLawFit, n: np.ndarray, W: np.ndarray, Y: np.ndarray,
                  d: np.ndarray | None = None) -> dict:
    """The leave-largest-size-out backtest of ``fit``'s law (Fernandes et al. 2023 predict
    their largest sizes from the smaller ones): refitted from its start grids, as a CV fold
    (:func:`_fold_fit`), on the runs ``n``, ``W``, ``Y`` (the seed means it was fitted on, NaN
    outside its domain) below the largest size, it predicts the runs at the largest size.

    Returns ``held_out_n``, ``sizes`` (those fitted), ``errors`` {pair: [(predicted −
    measured) / measured per run at the largest size]}, ``not_predicted`` {pair: count} (a
    failed refit or a non-finite prediction) and ``failed`` (targets whose refit failed); or
    ``{"why": …}`` where no backtest can be made: fewer than 3 sizes (two to fit, the largest
    to predict), or a law fitted per size (``datamixing``), which predicts no other size."""
    n = np.asarray(n, dtype=np.float64)
    sizes = sorted(float(v) for v in np.unique(n))
    if len(sizes) < 3:
        return {"why": f"{len(sizes)} fitted model size(s) (N = "
                       + ", ".join(f"{v:.3g}" for v in sizes) + "); a leave-largest-size-out "
                       "backtest needs at least 3 — two to fit, the largest to predict"}
    if fit.form == "datamixing":
        return {"why": "the datamixing law is fitted per size: it predicts no other size"}
    test = np.isclose(n, sizes[-1], rtol=1e-6)
    pred, failed = _fold_fit(fit, n, W, Y, d, ~test)
    errors: dict[str, list[float]] = {}
    missed: dict[str, int] = {}
    for i, pair in enumerate(fit.pairs or []):
        y, p = Y[test, i], pred[test, i]
        ok = np.isfinite(y) & (y > 0)
        good = ok & np.isfinite(p)
        errors[pair] = [float(v) for v in (p[good] - y[good]) / y[good]]
        missed[pair] = int((ok & ~good).sum())
    return {"held_out_n": sizes[-1], "sizes": sizes[:-1], "errors": errors,
            "not_predicted": missed, "failed": failed}


def _law_errors(fit: MixtureLawFit, runs: MixtureRuns, Y, cv_pred, cv_kind: str, folds: int,
                failed: int) -> dict:
    """``errors[form]``: CV errors of the fold predictions, held-out errors, fit size."""
    held = np.flatnonzero(runs.heldout)
    cv = _errors(Y, cv_pred)
    ho = _errors(runs.Y[held], fit.predict(runs.n[held], runs.W[held], _tokens(runs, held))) \
        if len(held) \
        else {"mae": None, "mape": None, "points": 0, "not_predicted": 0}
    return {"cv_mae": cv["mae"], "cv_mape": cv["mape"], "cv_points": cv["points"],
            "cv_not_predicted": cv["not_predicted"], "cv": cv_kind, "cv_folds": folds,
            "cv_failed": failed, "heldout_mae": ho["mae"], "heldout_mape": ho["mape"],
            "heldout_points": ho["points"], "heldout_not_predicted": ho["not_predicted"],
            "n_params": fit.n_params, "rmse": fit.goodness.get("rmse"),
            "r2": fit.goodness.get("r2"), "boot_resamples": 0, "boot_failed": None}


def _bootstrap_laws(jobs: _Jobs, fits: list[MixtureLawFit], n, W, Y, g, d, n_boot: int,
                    seed: int, errors: dict[str, dict]) -> None:
    """Bootstrap refits of ``fits`` (chunks of resamples as jobs); counts into ``errors``."""
    samples = bootstrap_resamples(g, n_boot, seed)
    chunks = np.array_split(np.arange(n_boot), max(1, min(n_boot, 4 * jobs.workers)))
    todo = [(fit, c) for fit in fits for c in chunks if len(c)]
    res = jobs.map(bootstrap_refits, [(fit, n, W, Y, [samples[i] for i in c],
                                       None if fit.d_ref is None else d) for fit, c in todo],
                   [f"{fit.form} bootstrap {len(c)} resamples" for fit, c in todo])
    for fit in fits:
        attach_bootstrap(fit, [r for (f, _), rs in zip(todo, res, strict=True) if f is fit
                               for r in rs], seed)
        errors[fit.form]["boot_resamples"] = n_boot
        errors[fit.form]["boot_failed"] = fit.meta["bootstrap"]["failed_refits"]


def _tokens(runs: MixtureRuns, rows: np.ndarray) -> np.ndarray | None:
    """The token budgets of ``rows`` (None when the table has none)."""
    return None if runs.tokens is None else runs.tokens[rows]


def _heldout_table(runs: MixtureRuns, fit: MixtureLawFit | None, chosen: str | None) -> dict:
    """Per held-out run and pair: predicted (by the chosen law), measured, error, noise (with
    ``noise_seeds`` and ``noise_dof`` where it is a seed spread)."""
    heldout: dict[str, dict] = {}
    held = np.flatnonzero(runs.heldout)
    keys = runs.mixture_keys
    pred = fit.predict(runs.n[held], runs.W[held], _tokens(runs, held)) \
        if fit is not None and len(held) else None
    for h, r in enumerate(held):
        rid = runs.run_ids[r]
        heldout[rid] = {}
        for i, p in enumerate(runs.pairs):
            if not np.isfinite(runs.Y[r, i]):
                continue
            pv = float(pred[h, i]) if pred is not None else float("nan")
            noise, src, seeds = _noise(runs, r, i, keys)
            heldout[rid][p] = {"predicted": pv, "measured": float(runs.Y[r, i]),
                               "error": pv - float(runs.Y[r, i]), "noise": noise,
                               "noise_source": src, "noise_seeds": seeds,
                               "noise_dof": None if seeds is None else seeds - 1,
                               "weight": float(runs.W[r, i]),
                               "n": float(runs.n[r]), "law": chosen}
    return heldout


def rank_laws(errors: dict[str, dict], preds: dict[str, np.ndarray], y: np.ndarray,
              forms: list[str] | None = None) -> tuple[list[str], dict[str, float], int | None]:
    """The one rule by which mixture laws are ranked: the laws of ``forms`` (default: every law
    in ``errors``) ordered by CV mean absolute error over one point set. The laws whose CV
    predicted every point are ranked by their CV MAE; when none did, the laws that predicted
    some are ranked by their MAE on the points every one of them predicted (``preds[form]``: CV
    predictions, NaN where a fold failed; ``y`` the losses), never each on its own points (a law
    whose failed folds skipped the hard points would look better).

    Returns (ranked laws, best first; their MAE; None when ranked on every point, else the
    number of common points). The other laws of ``forms`` are not ranked; none is when no law
    could be cross-validated, or when no point was predicted by every law (common points 0)."""
    forms = list(errors) if forms is None else [f for f in forms if f in errors]
    tried = [f for f in forms if errors[f]["cv_points"] > 0]
    full = [f for f in tried if errors[f]["cv_not_predicted"] == 0]
    if full or not tried:
        mae = {f: float(errors[f]["cv_mae"]) for f in full}
        return sorted(full, key=lambda f: mae[f]), mae, None
    common = np.isfinite(y) & np.logical_and.reduce([np.isfinite(preds[f]) for f in tried])
    if not common.any():
        return [], {}, 0
    mae = {f: float(np.mean(np.abs(preds[f][common] - y[common]))) for f in tried}
    return sorted(tried, key=lambda f: mae[f]), mae, int(common.sum())


def choose_law(errors: dict[str, dict], preds: dict[str, np.ndarray], y: np.ndarray,
               cv_kind: str = "leave-one-mixture-out") -> tuple[str | None, str]:
    """(chosen law, why): the first law of :func:`rank_laws` (the lowest CV mean absolute error
    among the laws whose CV predicted every point; when none did, on the points every law's CV
    predicted), or None with the reason when no law is ranked."""
    order, mae, common = rank_laws(errors, preds, y)
    if not order:
        if common is None:
            return None, "no law could be cross-validated"
        return None, ("no law's CV predicted every point, and no point was predicted by "
                      "every law: the laws cannot be compared on one point set")
    where = "" if common is None else f" on the {common} points every law's CV predicted"
    best = order[0]
    text = f"lowest {cv_kind} CV MAE{where}: {best} {mae[best]:.4g}"
    if common is None:
        text += f" (MAPE {errors[best]['cv_mape']:.3g} %)"
    if len(order) > 1:
        text += "; then " + ", ".join(f"{f} {mae[f]:.4g}" for f in order[1:])
    left = [f for f in errors if f not in order]
    if left:
        text += f"; not ranked (some CV points not predicted): {', '.join(left)}"
    return best, text + ". Held-out runs are not used for the choice."


def transfer_matrix(fit: MixtureLawFit) -> tuple[np.ndarray, np.ndarray]:
    """τ (K×K; row = target i, column = source j; diagonal 1) of a ``transfer`` law and its
    bootstrap sd (NaN without refits; 0 on the diagonal)."""
    if fit.form != "transfer":
        raise FitError(f"the transfer matrix needs the 'transfer' law, not {fit.form!r}")
    pairs = fit.pairs or []
    k = len(pairs)
    tau, sd = np.eye(k), np.zeros((k, k))
    for i, p in enumerate(pairs):
        for j, q in enumerate(pairs):
            if i != j:
                tau[i, j] = fit.params.get(f"tau[{p},{q}]", np.nan)
                sd[i, j] = (fit.stderr or {}).get(f"tau[{p},{q}]", np.nan)
    return tau, sd
