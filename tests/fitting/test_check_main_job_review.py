"""benchmarks/studies/check_main_job.py on fits.json values that the rules of 0183a09 mishandled: a pair
whose law gave no finite L∞, check 4's printed noise, and a backtest without seed noise."""

from __future__ import annotations

from fitting.report.sections.chinchilla import COOLED_LAW


def _no_fitted_value() -> dict:
    """en-de's regime entry as fitting.report.sections.regime writes it when the law asked for fitted the
    pair but its E was not finite and positive: the law named, no ``l_inf_fit``."""
    pair = {"l_inf_true": 0.100, "l_inf_law": COOLED_LAW, "l_inf_is_bound": False,
            "l_inf_budget": 0.12}
    return {"regime": {"pairs": {"en-de": pair}, "l_inf_law": COOLED_LAW}}


def test_check1_fails_a_pair_whose_law_gave_no_finite_l_inf(benchmark_script):
    """0183a09 reached ``abs(err)`` with err None and raised TypeError: the script died before
    printing any check instead of failing check 1."""
    job = benchmark_script("check_main_job")
    result = job.check(_no_fitted_value())
    d = result["l_inf"]["en-de"]
    assert d["status"] == "FAIL" and not d["ok"] and d["fit"] is None
    assert "no finite positive L∞" in d["reason"]
    assert result["checks"][1]["status"] == "FAIL" and not result["all_ok"]


def _heldout(noise: float | None) -> dict:
    entry = {"run": "mini-3_p0.60_s0", "pair": "en-de", "predicted": 0.1040, "measured": 0.1000,
             "seeds": 2, "error": 0.04, "noise": noise, "noise_source": "heldout seeds (n=2)",
             "noise_seeds": 2, "noise_dof": 1, "within_rel": False, "law": COOLED_LAW, "primary": True,
             "within_tolerance": noise is not None and 0.004 <= 3 * noise}
    return {"heldout": [entry]}


def test_check4_prints_the_seed_sd_as_such_and_its_multiple(benchmark_script, capsys):
    """0183a09 printed the seed sd (1σ) after the words "3x seed sd": a reader took σ = 0.0010
    for the tolerance 3σ and read |Δ| = 0.004 as four times it, where it is 1.3 times."""
    job = benchmark_script("check_main_job")
    job.print_result(job.check(_heldout(0.0010)))
    out = capsys.readouterr().out
    assert "seed sd 0.0010 (3x = 0.0030), heldout seeds (n=2), 2 seeds, 1 dof" in out
    assert "3x seed sd 0.0010" not in out


def test_a_backtest_without_seed_noise_is_printed_as_not_judged(benchmark_script, capsys):
    """A study without repeated seeds: the backtest has no noise (``noise_rel`` None); the
    script prints it as not judged, and main_job_seeds' table too (0183a09's formatted
    ``100 * None``)."""
    from fitting.laws.budget.chinchilla_joint import NO_NOISE_GIVEN

    bt = {"held_out_n": 1.5e5, "rmse_rel": 0.05, "mean_rel": -0.04, "max_abs_rel": 0.07,
          "l_inf": 0.9, "errors": [{"d": 1.0, "p": 1.0, "error": -0.05}], "noise_rel": None,
          "tolerance": 3.0, "within": None, "noise_source": NO_NOISE_GIVEN, "budgets": None}
    job = benchmark_script("check_main_job")
    fits = {**_no_fitted_value(), "chinchilla": {"joint": {"backtest": {"en-de": bt}}}}
    job.print_result(job.check(fits))
    assert "RMSE 5.00 % (mean -4.00 %) vs not judged: no seed noise measured" in \
        capsys.readouterr().out
    seeds = benchmark_script("main_job_seeds")
    row = {"seed": 0, "wall_s": 1.0, "heldout": {}, "check1_ok": False,
           "l_inf": {"en-de": {"fit": None, "true": 0.1, "error": None, "ok": False}},
           "check4_ok": False, "all_ok": False,
           "backtest": {"en-de": {k: bt[k] for k in ("rmse_rel", "noise_rel", "tolerance",
                                                      "within")}}}
    assert "5.00 % (no seed noise: not judged)" in seeds.table([row])


def _group(pair: str, n: float, weight: float, mean: float, sd: float) -> dict:
    return {"pair": pair, "n": n, "weight": weight, "mixture": "", "weights": "", "seeds": 2,
            "mean": mean, "sd": sd}


def test_zero_shot_repeats_are_not_the_seed_noise_of_a_trained_loss():
    """The study's seed noise (the σ of every backtest, of the extrapolation rows and of a
    single-seed held-out run) reads trained pairs only. 0183a09 took the median over every
    repeated group at the largest repeated size, zero-shot ones (weight 0, ten times noisier)
    included: en-zh's σ rose from 1 % to 5.5 %; and a zero-shot repeat at a larger size than
    any trained one moved the size there and left the trained pairs without a σ."""
    from fitting.report.sections.chinchilla import largest_size_seed_noise
    from fitting.report.sections.heldout import heldout_noise

    groups = [_group("en-de", 1e6, 0.5, 1.0, 0.01), _group("en-zh", 1e6, 0.5, 1.5, 0.015),
              _group("en-zh", 1e6, 0.0, 6.0, 0.6)]
    rel, n_at = largest_size_seed_noise({"groups": groups})
    assert n_at == 1e6 and rel == {"en-de": 0.01, "en-zh": 0.01}
    noise = heldout_noise({"seeds": 1, "pair": "en-zh", "measured": 2.0}, {"groups": groups})
    assert noise["noise"] == 0.02 and noise["noise_dof"] == 1
    larger = {"groups": [*groups, _group("en-de", 4e6, 0.0, 7.0, 0.7)]}
    assert largest_size_seed_noise(larger) == ({"en-de": 0.01, "en-zh": 0.01}, 1e6)
    # a table without weights (NaN): every repeat is a trained one
    unweighted = [{**g, "weight": float("nan")} for g in groups[:2]]
    assert largest_size_seed_noise({"groups": unweighted})[0] == {"en-de": 0.01, "en-zh": 0.01}


def _with_extrapolation(rows: list[dict] | None, skipped: str | None = None) -> dict:
    fits = _no_fitted_value()
    if rows is not None:
        fits["extrapolation"] = {"rows": rows}
    if skipped:
        fits["skipped"] = {"section extrapolation": skipped}
    return fits


def _larger(pair: str, verdict: str) -> dict:
    return {"kind": "larger size", "pair": pair, "rmse": 0.05, "worst": 0.07,
            "three_sigma": 0.03, "verdict": verdict}


def test_check6_fails_a_report_whose_first_section_failed_or_computed_no_larger_size_row(
        benchmark_script, capsys):
    """0183a09's checks never read fits.json's extrapolation section: the writer reduces a
    section's exception to one "Skipped" line, so a report whose first section crashed passed
    checks 1–5. Check 6 fails it, and a pair whose larger-size row was not computed; a computed
    row that does not hold is information (a finding, not a broken pipeline)."""
    job = benchmark_script("check_main_job")
    crashed = job.check(_with_extrapolation(None, skipped="TypeError: boom"))
    assert crashed["checks"][6]["status"] == "FAIL" and "boom" in crashed["checks"][6]["reason"]
    absent = job.check(_with_extrapolation(None))
    assert absent["checks"][6]["status"] == "FAIL"
    missing = job.check(_with_extrapolation([_larger("en-de", "not computed: fewer sizes")]))
    assert missing["checks"][6]["status"] == "FAIL" and "en-de" in missing["checks"][6]["reason"]
    fine = job.check(_with_extrapolation([_larger("en-de", "does not hold")]))
    assert fine["checks"][6]["status"] == "ok"
    job.print_result(fine)
    assert "larger size en-de (information): RMSE 5.00 %" in capsys.readouterr().out


def test_check2_says_how_many_per_weight_alphas_it_compared(benchmark_script, capsys):
    """Per-weight α without a finite sd leave the agreement test; 0183a09 printed "per weight
    agree True" when 2 of 3 weights were compared, saying nothing of the third."""
    job = benchmark_script("check_main_job")
    power = {"en-de": {w: {"params": {"alpha": 0.5}, "stderr": {"alpha": s}}
                       for w, s in (("0.3", 0.01), ("0.5", 0.01), ("1", float("nan")))}}
    fits = {**_no_fitted_value(), "power": power,
            "joint": {"params": {"alpha[en-de]": 0.5}, "stderr": {"alpha[en-de]": 0.01}}}
    result = job.check(fits)
    assert result["alpha"]["en-de"]["per_weight_compared"] == 2
    job.print_result(result)
    assert "(2 of 3 weights compared" in capsys.readouterr().out


def test_the_backtest_line_names_the_seed_sd_and_its_multiple(benchmark_script, capsys):
    """0183a09 printed "3x noise 4.72 %" where 4.72 % was σ (3σ = 14.16 %): a reader took the
    RMSE 10.4 % for beyond 3σ while the line said within."""
    bt = {"held_out_n": 5.8e4, "rmse_rel": 0.104, "mean_rel": -0.10, "noise_rel": 0.0472,
          "tolerance": 3.0, "within": True, "noise_source": "given (seed noise)"}
    job = benchmark_script("check_main_job")
    job.print_result(job.check({**_no_fitted_value(),
                                "chinchilla": {"joint": {"backtest": {"en-de": bt}}}}))
    out = capsys.readouterr().out
    assert "seed sd 4.72 % (3x = 14.16 %; given (seed noise)): within" in out
    assert "3x noise 4.72" not in out


def test_a_rows_line_names_the_multiple_and_the_sigma_its_verdict_used(benchmark_script,
                                                                      capsys):
    """A longer-run row is judged against the per-point scatter, on its dof's multiple: the
    line printed "vs 3x seed noise" whatever the row was judged on."""
    row = {"kind": "longer run", "pair": "en-de", "rmse": 0.05, "worst": 0.09,
           "multiple": 3.0, "three_sigma": 0.15, "sigma_seeds": 400, "sigma_dof": 380,
           "sigma_source": "per-point scatter", "verdict": "holds"}
    job = benchmark_script("check_main_job")
    job.print_result(job.check(_with_extrapolation([_larger("en-de", "holds"), row])))
    out = capsys.readouterr().out
    assert "vs 3σ = 15.00 % (per-point scatter) (σ from 400 measurements, 380 dof): holds" in out
    assert "3x seed noise" not in out
