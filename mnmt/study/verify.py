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

at one size (``StudySpec.verify_size``, default the largest of ``StudySpec.sizes`` by
non-embedding parameters; any zoo size) with ``StudySpec.verify_seeds`` seeds
(``SEED_BASE``, ``SEED_BASE + 1``, …; a study whose design seeds reach them is refused, so no
verification run repeats a fitted one). They are ordinary runs under OUT/runs/ with ids ``<size>_verify-<mixture>_s<seed>``
(e.g. ``mini-1_verify-recommended_s1000``), trained by the study's own machinery (groups,
worker processes) and resumable: finished ones are skipped. A verification run that exists
with other weights than planned (the recommendation changed since) is refused, naming it.

The report is then written again with these runs in the table but out of every fit
(:mod:`fitting.report.verification`: the section "Verification" and
``fits.json["mixture"]["verification"]``). `mnmt-study verify OUT` runs the stage on demand;
``StudySpec.verify`` runs it at the end of `mnmt-study run`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from fitting.data.schema import RECOMMENDED
from mnmt.study import mixture_design
from mnmt.study.spec import RunSpec, StudySpec, run_id, size_weights
from mnmt.study.stages import STUDY_FILE, UsageError

__all__ = ["SEED_BASE", "RECOMMENDED", "PREFERRED", "TAG_PREFIX", "verification_size", "verification_seeds",
           "read_recommendation", "verification_mixtures", "verification_runs", "plan",
           "check_trained_weights", "training_spec", "recorded_spec", "summary"]

# The first verification seed; the others follow it.
SEED_BASE = 1000
PREFERRED = "preferred"
TAG_PREFIX = "verify-"


def verification_size(spec: StudySpec, size: str | None = None) -> str:
    """`size`, else `StudySpec.verify_size`, else the largest of `StudySpec.sizes` (by
    non-embedding parameters); UsageError for a name the model zoo does not know."""
    from mnmt.models import zoo  # light: no jax

    def params(name: str) -> int:
        try:
            return int(zoo.describe(name, spec.vocab_size)["non_embedding"])
        except ValueError as err:
            raise UsageError(f"StudySpec.verify_size: {str(err).splitlines()[0]}") from err

    chosen = size or spec.verify_size
    if chosen:
        params(chosen)
        return chosen
    return max(spec.sizes, key=params)


def verification_seeds(spec: StudySpec, count: int | None = None) -> list[int]:
    """`count` (else `StudySpec.verify_seeds`) seeds from SEED_BASE; UsageError below 2."""
    n = spec.verify_seeds if count is None else count
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
    uniform = mixture_design.uniform_mixtures(dataclasses.replace(spec, uniform_mixture=True))
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
    chosen = verification_size(spec, size)
    seed_list = verification_seeds(spec, seeds)
    shared = sorted(set(seed_list) & set(spec.seeds))
    if shared:
        raise UsageError(f"StudySpec.seeds {list(spec.seeds)}: seed(s) {shared} are also "
                         f"verification seeds ({SEED_BASE}, {SEED_BASE + 1}, …); use design "
                         f"seeds below {SEED_BASE}")
    mixtures = verification_mixtures(spec, read_recommendation(out))
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
    """The spec the verification runs train under: the study's, without cool-down branches
    (a verification run is judged by its final loss only)."""
    if not spec.cooldown_branches:
        return spec
    return dataclasses.replace(spec, cooldown_branches=(), branch_cooldown_fraction=0.0)


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
    known = {f.name for f in dataclasses.fields(StudySpec)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise UsageError(f"{path}: unknown StudySpec field(s) {unknown} (written by a newer "
                         "version?)")
    try:
        return StudySpec(**{k: _tuples(v) for k, v in fields.items()})
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
