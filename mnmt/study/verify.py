"""Verification: train what a K-pair study's report recommends, beside the study's baselines.

After the report (OUT/report/fits.json), the verification stage trains

- the recommended weights (``fits.json["mixture"]["recommendation"]["weights"]``, mixture
  ``recommended``) and
- the study's baseline mixtures, with the weights the design gives them
  (:mod:`mnmt.study.mixture_design`): ``uniform`` (always), the temperature and oversampling
  mixtures of ``StudySpec.temperatures`` / ``oversampling`` (``T5``, ``os5``) and UniMax
  (``unimax4``), and — when ``StudySpec.mixture_preferences`` weigh the pairs unequally —
  ``preferred``, the weights in proportion to the preferences (the mixture a user with those
  priorities would try first, e.g. only the pairs they need),

at the size the recommendation is for (:func:`verification_size`: the size of the study whose
non-embedding parameters are ``fits.json`` ``mixture.recommendation.target_size``, i.e.
``StudySpec.report_target_sizes[0]``; ``StudySpec.verify_size`` or ``--size`` may name it, and a
size of another N is refused) with ``StudySpec.verify_seeds`` seeds (default 3; ``SEED_BASE``,
``SEED_BASE + 1``, … — the same seeds for every mixture, so the report compares them paired by
seed; a study whose design seeds reach them is refused, so no verification run repeats a fitted
one). They are ordinary runs under OUT/runs/ with ids ``<size>_verify-<mixture>_s<seed>`` (e.g.
``mini-1_verify-recommended_s1000``), trained by the study's own machinery (groups, worker
processes), evaluated at the end only, and resumable: finished ones are skipped. A verification
run that exists with other weights than planned (the recommendation changed since) is refused,
naming it.

The report is then written again with these runs in the table but out of every fit
(:mod:`fitting.report.sections.verification`: the section "Verification" and
``fits.json["mixture"]["verification"]``). `mnmt-study verify OUT` runs the stage on demand;
``StudySpec.verify`` runs it at the end of `mnmt-study run`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from fitting.data.schema import RECOMMENDED
from mnmt.study import mixture_design
from mnmt.study.spec import RunSpec, StudySpec, field_names, run_id, size_weights
from mnmt.study.stages import STUDY_FILE, UsageError

__all__ = ["SEED_BASE", "RECOMMENDED", "PREFERRED", "TAG_PREFIX", "verification_size", "verification_seeds",
           "read_recommendation", "verification_mixtures", "verification_runs", "plan",
           "check_trained_weights", "training_spec", "recorded_spec", "summary"]

# The first verification seed; the others follow it.
SEED_BASE = 1000
PREFERRED = "preferred"
TAG_PREFIX = "verify-"


def _params(spec: StudySpec, name: str, field: str) -> int:
    """Non-embedding parameters of zoo size `name`; UsageError naming `field` if unknown."""
    from mnmt.models import zoo  # light: no jax

    try:
        return int(zoo.describe(name, spec.vocab_size)["non_embedding"])
    except ValueError as err:
        raise UsageError(f"{field}: {str(err).splitlines()[0]}") from err


def verification_size(spec: StudySpec, size: str | None = None,
                      target_n: float | None = None) -> str:
    """The size the verification trains: the size the recommendation is for, by construction.

    `target_n`: the recommendation's N (``fits.json`` ``mixture.recommendation.target_size``),
    else `StudySpec.report_target_sizes[0]` (what the report recommends for). The size is
    `size` (``--size``), else `StudySpec.verify_size`, else the size of `StudySpec.sizes` or
    `StudySpec.heldout` whose non-embedding parameters are N (relative 1e-6). UsageError, naming
    the fields, for an unknown zoo size, for a chosen size whose N is not the target's, and when
    no target is set or no size of the study has it (a verdict at another size than the advice's
    would not be about the advice)."""
    if target_n is None and spec.report_target_sizes:
        target_n = float(spec.report_target_sizes[0])
    if target_n is None:
        raise UsageError("StudySpec.report_target_sizes: empty, so the recommendation is for 4x "
                         "the largest fitted size, a size no verification trains; set "
                         "report_target_sizes[0] to the non-embedding parameters of the size "
                         "to verify (e.g. mini-1: 58136)")
    target_n = float(target_n)
    field = "--size" if size else "StudySpec.verify_size"
    chosen = size or spec.verification.verify_size
    if chosen:
        n = _params(spec, chosen, field)
        if not math.isclose(n, target_n, rel_tol=1e-6):
            raise UsageError(f"{field} {chosen!r} has N = {n} non-embedding parameters, but the "
                             f"recommendation is for N = {target_n:g} (fits.json mixture."
                             f"recommendation.target_size, from StudySpec.report_target_sizes"
                             f"[0]); verify at the size the advice is for, or set "
                             f"report_target_sizes[0] = {n} and write the report again")
        return chosen
    candidates = list(dict.fromkeys([*spec.sizes, *(h[0] for h in spec.heldout)]))
    have = {name: _params(spec, name, "StudySpec.sizes") for name in candidates}
    for name, n in have.items():
        if math.isclose(n, target_n, rel_tol=1e-6):
            return name
    raise UsageError(f"StudySpec.report_target_sizes[0] = {target_n:g}: no size of "
                     f"StudySpec.sizes or StudySpec.heldout has that many non-embedding "
                     f"parameters ({', '.join(f'{k}: {v}' for k, v in have.items())}), so the "
                     f"verification could not train at the size the recommendation is for; "
                     f"set StudySpec.verify_size to a zoo size with N = {target_n:g}, or "
                     f"report_target_sizes[0] to one of those N")


def verification_seeds(spec: StudySpec, count: int | None = None) -> list[int]:
    """`count` (else `StudySpec.verify_seeds`) seeds from SEED_BASE; UsageError below 2."""
    n = spec.verification.verify_seeds if count is None else count
    if n < 2:
        raise UsageError(f"verification seeds: expected at least 2 (the verdict needs a seed "
                         f"sd), got {n}")
    return [SEED_BASE + i for i in range(n)]


def read_recommendation(out: Path) -> dict:
    """``fits.json["mixture"]["recommendation"]`` of OUT's report; UsageError naming the file
    and why there is none."""
    path = out / "report" / "fits.json"
    if not path.exists():
        raise UsageError(f"{path}: no report yet; run `mnmt-study run` on this study first")
    try:
        fits = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: not valid JSON ({err})") from err
    mixture = fits.get("mixture") if isinstance(fits, dict) else None
    rec = (mixture or {}).get("recommendation")
    if not rec:
        why = (fits.get("skipped") or {}).get("mixture recommendation") \
            or (mixture or {}).get("skipped") \
            or ("the study has fewer than 3 pairs" if mixture is None else "none was made")
        raise UsageError(f"{path}: no K-pair mixture recommendation to verify ({why})")
    if not isinstance(rec.get("weights"), dict):
        raise UsageError(f"{path}: mixture.recommendation.weights: expected {{pair: weight}}, "
                         f"got {rec.get('weights')!r}")
    return rec


def verification_mixtures(spec: StudySpec, recommendation: dict) -> dict[str, dict[str, float]]:
    """{name: {pair: weight}}: the recommended weights, then the study's baselines (uniform
    always, its temperature/oversampling and UniMax mixtures, and ``preferred`` — weights ∝
    `StudySpec.mixture_preferences` — when those are not all equal), in `spec.pairs` order."""
    weights = recommendation["weights"]
    missing = [p for p in spec.pairs if p not in weights]
    if missing or not all(math.isfinite(float(w)) and float(w) >= 0 for w in weights.values()):
        raise UsageError(f"fits.json mixture.recommendation.weights: expected a non-negative "
                         f"weight for every pair {list(spec.pairs)}, got {weights}")
    total = sum(float(weights[p]) for p in spec.pairs)
    out = {RECOMMENDED: {p: float(weights[p]) / total for p in spec.pairs}}
    uniform = mixture_design.uniform_mixtures(spec.replace(uniform_mixture=True))
    for tag, w in uniform + size_weights(spec) + mixture_design.unimax_mixtures(spec):
        out[tag] = {p: float(w[p]) for p in spec.pairs}
    pi = mixture_design.preferences(spec)
    if pi and len(set(pi.values())) > 1:
        out[PREFERRED] = {p: pi[p] / sum(pi.values()) for p in spec.pairs}
    return out


def verification_runs(mixtures: dict[str, dict[str, float]], size: str,
                      seeds: list[int]) -> list[RunSpec]:
    """One run per (mixture, seed) at `size`, mixture tag ``verify-<name>``."""
    return [RunSpec(run_id=run_id(size, w, seed, TAG_PREFIX + name), size=size, weights=dict(w),
                    seed=seed, mixture=TAG_PREFIX + name)
            for name, w in mixtures.items() for seed in seeds]


def plan(spec: StudySpec, out: Path, *, size: str | None = None,
         seeds: int | None = None) -> tuple[list[RunSpec], dict]:
    """The verification runs of the study in OUT and their plan (what
    `fitting.report.writer.write_report(verification=…)` takes: size, seeds, mixtures, runs)."""
    if len(spec.pairs) < 3:
        raise UsageError(f"StudySpec.verify: verification needs a K-pair study (3 pairs or "
                         f"more), got {list(spec.pairs)}")
    recommendation = read_recommendation(out)
    chosen = verification_size(spec, size, recommendation.get("target_size"))
    seed_list = verification_seeds(spec, seeds)
    shared = sorted(set(seed_list) & set(spec.seeds))
    if shared:
        raise UsageError(f"StudySpec.seeds {list(spec.seeds)}: seed(s) {shared} are also "
                         f"verification seeds ({SEED_BASE}, {SEED_BASE + 1}, …); use design "
                         f"seeds below {SEED_BASE}")
    mixtures = verification_mixtures(spec, recommendation)
    runs = verification_runs(mixtures, chosen, seed_list)
    record = {"size": chosen, "seeds": seed_list, "mixtures": mixtures,
              "runs": {run.run_id: run.mixture[len(TAG_PREFIX):] for run in runs}}
    return runs, record


def check_trained_weights(runs: list[RunSpec], runs_dir: Path) -> None:
    """UsageError when a run directory of `runs` holds a run trained with other weights (a
    verification of an earlier recommendation); runs not started are fine."""
    for run in runs:
        path = runs_dir / run.run_id / "run.json"
        if not path.exists():
            continue
        try:
            trained = json.loads(path.read_text(encoding="utf-8"))["mixture"]["weights"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            continue  # unreadable: the trainer reports it, naming the file
        if any(abs(float(trained.get(p, 0.0)) - w) > 1e-6 for p, w in run.weights.items()):
            raise UsageError(f"{path.parent}: trained with weights {trained}, but the "
                             f"verification now plans {run.weights} (the recommendation "
                             f"changed); move the old verification runs "
                             f"({runs_dir}/*_{TAG_PREFIX}*) away to verify the new one")


def training_spec(spec: StudySpec) -> StudySpec:
    """The spec the verification runs train under: the study's, without cool-down branches or an
    early stop, and evaluated at the end only (a verification run is judged by its final loss alone; the
    intermediate evaluations cost a group time and never change a final loss)."""
    last = max([spec.schedule.train_steps,
                *(steps for _, steps in spec.schedule.train_steps_by_size)])
    if (not spec.branches.cooldown_branches and spec.evaluation.eval_every >= last
            and spec.early_stop.stop_fraction >= 1.0):
        return spec
    return spec.replace(cooldown_branches=(), branch_cooldown_fraction=0.0, eval_every=last,
                        stop_fraction=1.0)


def _tuples(value):
    """JSON lists back to the tuples a StudySpec holds."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def recorded_spec(out: Path) -> StudySpec:
    """The StudySpec that OUT/study.json records (written by `mnmt-study run`)."""
    path = out / STUDY_FILE
    if not path.is_file():
        raise UsageError(f"{path}: not found; {out} is not a study output directory "
                         "(`mnmt-study run --out DIR` writes one)")
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(fields, dict):
        raise UsageError(f"{path}: expected a JSON object (a study record)")
    known = set(field_names())
    unknown = sorted(set(fields) - known)
    if unknown:
        raise UsageError(f"{path}: unknown StudySpec field(s) {unknown} (written by a newer "
                         "version?)")
    try:
        return StudySpec.of(**{k: _tuples(v) for k, v in fields.items()})
    except ValueError as err:
        raise UsageError(f"{path}: {str(err).strip().splitlines()[0]}") from err


def summary(verification: dict | None) -> str:
    """The verification's result in a few lines for the log."""
    if not verification:
        return "verification: no section in the report"
    if "skipped" in verification:
        return f"verification: skipped ({verification['skipped']})"
    lines = [f"verification at {verification['size']} with seeds {verification['seeds']} "
             "(J = preference-weighted mean loss; measured mean ± seed sd, predicted):"]
    for name, m in verification["mixtures"].items():
        pred = (m.get("predicted") or {}).get("objective")
        lines.append(f"  {name:<14s} J {m['measured']['objective']:.4f} ± "
                     f"{m['sd']['objective']:.4f}" + ("" if pred is None else
                                                      f" (predicted {pred:.4f})"))
    for name, c in verification["comparisons"].items():
        lines.append(f"  recommended vs {name}: mean gap {c['gap']:+.4f}, paired sd "
                     f"{c['paired_sd']:.4f} over {c['n_seeds']} seeds ({c['n_diverged']} "
                     f"diverged), Holm p {c['p_holm']:.2g} -> "
                     + ("beats it" if c["beats"] else f"does not beat it ({c.get('why')})"))
    return "\n".join(lines)
