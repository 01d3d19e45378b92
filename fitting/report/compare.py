"""The effective fraction f(p) of several studies side by side (Fernandes et al. 2023 Fig. 6:
related vs distant pairs, En→XX vs XX→En): ``mnmt-fit compare``.

Each study — a tidy metrics table (CSV/Parquet), a study's output directory (its
``metrics.csv``/``metrics.parquet``, else its ``runs/``) or a folder of run directories — gets
the joint law (eq. 7) fitted on its final losses (seed means of repeated runs) and f_i(p) of
eq. 10 with the sd over 1% perturbation refits (footnote 5), plus f̂ of eq. 12 where it can be
fitted. Its synergy is the mean excess f(p) − p over the weights 0 < p < 1: positive, the pairs
help each other (XX→En in Fernandes et al.); near 0, a model of size N at weight p is worth a
single-pair model of size pN (En→XX); negative, they interfere. The verdict says which, with
2 sd of the mean excess as the margin.

:func:`write_comparison` writes ``comparison.md``, ``comparison.json`` and
``figures/fraction_comparison.png`` (one panel per study, pairs labelled).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fitting import plots
from fitting.core.base import FitError, json_safe
from fitting.core.options import NO_UNCERTAINTY, UncertaintyOptions
from fitting.core.uncertainty import beyond_sd
from fitting.data import io
from fitting.data.seeds import seed_means
from fitting.data.tables import final_losses, read_table, round_weights
from fitting.laws.size.effective import fit_multilingual_law
from fitting.laws.size.joint import fit_joint_law
from fitting.plots.laws import plot_fraction_panels
from fitting.report.markdown import Document, format_number

__all__ = ["Comparison", "resolve_study", "study_fractions", "write_comparison"]

_TABLES = ("metrics.csv", "metrics.parquet", "metrics.csv.gz")


@dataclass
class Comparison:
    """What :func:`write_comparison` wrote and computed: per study (in input order) its label,
    source, f(p) points, f̂ parameters, synergy and, where f(p) could not be had, why."""

    out_dir: str
    markdown_path: str
    json_path: str
    figure_path: str | None
    studies: list[dict] = field(default_factory=list)
    markdown: str = ""


def resolve_study(path: str | os.PathLike) -> tuple[pd.DataFrame, str]:
    """The tidy table of one study input and the file or directory it was read from."""
    path = os.fspath(path)
    if not io.is_remote(path) and os.path.isdir(path):
        for name in _TABLES:
            if os.path.exists(os.path.join(path, name)):
                return read_table(os.path.join(path, name)), os.path.join(path, name)
        runs = os.path.join(path, "runs")
        if os.path.isdir(runs) and not os.path.exists(os.path.join(path, "run.json")):
            return read_table(runs), runs
    return read_table(path), path


def _label(table: pd.DataFrame, source: str) -> str:
    if "study" in table.columns:
        names = [s for s in table["study"].astype(str).unique() if s and s != "nan"]
        if len(names) == 1:
            return names[0]
    base = os.path.basename(os.path.normpath(source))
    return os.path.basename(os.path.dirname(os.path.normpath(source))) if base in (
        *_TABLES, "runs") else base


def study_fractions(table: pd.DataFrame, *, label: str, eval_set: str = "validation",
                    metric: str = "loss", n_refits: int = 30, seed: int = 0,
                    fit_f_hat: bool = True) -> dict[str, Any]:
    """f(p) of one study: ``{"label", "pairs": {pair: {p: (f, sd)}}, "f_hat": {pair: {c1, c2,
    c3}}, "synergy": {pair: {...}}, "skipped": reason or None}``, and ``"left_out"``: the
    (pair, weight) groups seen at a single model size, which the joint law cannot use."""
    out: dict[str, Any] = {"label": label, "pairs": {}, "f_hat": {}, "synergy": {},
                           "skipped": None}
    try:
        fin, _ = final_losses(table, eval_set=eval_set, metric=metric, drop_invalid=True)
        fin = seed_means(round_weights(fin))  # 1 − 0.7 and 0.3: one weight
        if "weight" not in fin.columns:
            raise FitError("the table has no weight column: f(p) needs mixture weights")
        fin = fin[fin["weight"].notna()]
        # a weight seen at one size only (a held-out run, typically) pins no β_p: left out
        sizes_at = fin.groupby(["pair", "weight"])["n"].transform("nunique")
        lone = fin[sizes_at < 2]
        if len(lone):
            out["left_out"] = sorted({f"{pr} p={w:g}" for pr, w in zip(lone["pair"], lone["weight"],
                                                                        strict=True)})
        fin = fin[sizes_at >= 2]
        unc = UncertaintyOptions(method="perturbation" if n_refits > 1 else None,
                                 n_refits=max(int(n_refits), 2), seed=seed)
        joint = fit_joint_law(fin, uncertainty=unc)
    except FitError as e:
        out["skipped"] = f"joint law (eq. 7): {e}"
        return out
    reasons = []
    for pair in joint.pairs or []:
        ws = [w for w in (joint.weights or {}).get(pair, []) if w > 0]
        if 1.0 not in ws:
            reasons.append(f"{pair}: no runs with p = 1 (eq. 10 needs β_1)")
            continue
        samples = joint.fraction_samples(pair) if joint.samples else {}
        pts = {}
        for w in ws:
            f = float(joint.fraction(w, pair)[0])
            s = samples.get(w)
            pts[float(w)] = (f, float(np.std(s, ddof=1)) if s is not None and len(s) > 1
                             else float("nan"))
        out["pairs"][pair] = pts
        inner = [w for w in ws if 0 < w < 1]
        if inner:
            exc = np.array([pts[w][0] - w for w in inner])
            per_sample = (np.mean([samples[w] - w for w in inner], axis=0)
                          if all(w in samples for w in inner) else None)
            sd = float(np.std(per_sample, ddof=1)) if per_sample is not None and \
                per_sample.size > 1 else float("nan")
            mean = float(exc.mean())
            verdict = ("synergy" if beyond_sd(mean, sd) else
                       "interference" if beyond_sd(-mean, sd) else
                       "neutral (within 2 sd)" if np.isfinite(sd) else
                       ("synergy" if mean > 0 else "interference") + " (no sd)")
            out["synergy"][pair] = {"mean_excess": mean, "sd": sd, "verdict": verdict,
                                    "weights": inner}
    if reasons:
        out["skipped"] = "; ".join(reasons)
    if fit_f_hat and out["pairs"]:
        try:
            law = fit_multilingual_law(fin, form="eq12",
                                       uncertainty=NO_UNCERTAINTY, backtest=None)
            out["f_hat"] = {p: {k: law.params[f"{k}[{p}]"] for k in ("c1", "c2", "c3")}
                            for p in out["pairs"] if p not in law.not_identified()}
        except FitError as e:
            out["f_hat_skipped"] = str(e)
    return out


def write_comparison(inputs: Sequence[str | os.PathLike | pd.DataFrame], out_dir: str, *,
                     labels: Sequence[str] | None = None, eval_set: str = "validation",
                     metric: str = "loss", n_refits: int = 30, seed: int = 0,
                     fit_f_hat: bool = True, title: str = "f(p) side by side") -> Comparison:
    """Compute f(p) for each study of ``inputs`` and write the comparison into ``out_dir``."""
    if not inputs:
        raise FitError("compare: give at least one study (a table or an output directory)")
    if labels is not None and len(labels) != len(inputs):
        raise FitError(f"compare: {len(labels)} labels for {len(inputs)} studies")
    os.makedirs(os.path.join(out_dir, "figures"), exist_ok=True)
    cmp = Comparison(out_dir=out_dir, markdown_path=os.path.join(out_dir, "comparison.md"),
                     json_path=os.path.join(out_dir, "comparison.json"), figure_path=None)
    seen: dict[str, int] = {}
    for i, item in enumerate(inputs):
        if isinstance(item, pd.DataFrame):
            table, source = item, f"table {i + 1}"
        else:
            table, source = resolve_study(item)
        label = labels[i] if labels is not None else _label(table, source)
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:  # two studies of one name: keep both panels apart
            label = f"{label} ({seen[label]})"
        st = study_fractions(table, label=label, eval_set=eval_set, metric=metric,
                             n_refits=n_refits, seed=seed, fit_f_hat=fit_f_hat)
        st["source"] = source
        cmp.studies.append(st)
    doc = Document()
    doc.h(1, title)
    doc.p("Effective fraction of parameters f_i(p) = (β_{1,i}/β_{p,i})^(1/α_i) (Fernandes eq. 10) "
          "from the joint law (eq. 7) of each study, ± sd over 1% perturbation refits; "
          "synergy = mean of f(p) − p over 0 < p < 1 (> 0: the pairs help each other, as "
          "XX→En in Fernandes Fig. 6 right; ≈ 0: a model of size N at weight p is worth a "
          "single-pair model of size pN, as En→XX for related and distant pairs alike).")
    weights = sorted({w for st in cmp.studies for d in st["pairs"].values() for w in d})
    rows, srows = [], []
    for st in cmp.studies:
        for pair, d in st["pairs"].items():
            rows.append([st["label"], pair] + [format_number(d[w][0], d[w][1], 3) if w in d
                                               else "–" for w in weights])
            s = st["synergy"].get(pair)
            fh = st["f_hat"].get(pair)
            srows.append([st["label"], pair,
                          format_number(s["mean_excess"], s["sd"], 3) if s else "–",
                          s["verdict"] if s else "–",
                          ", ".join(f"{k} {v:.3g}" for k, v in fh.items()) if fh else "–"])
    doc.table(["study", "pair", *[f"f({w:g})" for w in weights]], rows)
    doc.table(["study", "pair", "synergy (mean f(p) − p)", "verdict", "f̂ eq. 12"], srows)
    notes = {st["label"]: st["skipped"] for st in cmp.studies if st["skipped"]}
    doc.ul([f"{k}: {v}" for k, v in notes.items()]
           + [f"{st['label']}: left out (one model size only, no β_p): "
              + ", ".join(st["left_out"]) for st in cmp.studies if st.get("left_out")])
    try:
        curves = {st["label"]: {p: (lambda x, c=c: x + c["c1"] * x ** c["c2"] *
                                    (1 - x) ** c["c3"]) for p, c in st["f_hat"].items()}
                  for st in cmp.studies}
        fig = plot_fraction_panels({st["label"]: st["pairs"] for st in cmp.studies}, curves,
                                   notes={k: v for k, v in notes.items()})
        cmp.figure_path = plots.save(fig, os.path.join(out_dir, "figures",
                                                       "fraction_comparison.png"))
        doc.img("figures/fraction_comparison.png", "f(p) per study, one panel each (points "
                "± sd: eq. 10; dashed: f̂ of eq. 12; dotted: f(p) = p); cf. Fernandes Fig. 6.")
    except Exception as e:  # plotting must never break the comparison
        doc.p(f"Figure skipped: {type(e).__name__}: {e}")
    cmp.markdown = doc.markdown()
    payload = {"title": title, "eval_set": eval_set, "metric": metric,
               "figure": cmp.figure_path,
               "studies": [{**st, "pairs": {p: {f"{w:g}": {"f": v[0], "sd": v[1]}
                                                for w, v in sorted(d.items())}
                                            for p, d in st["pairs"].items()}}
                           for st in cmp.studies]}
    io.write_files_atomic({cmp.markdown_path: cmp.markdown,
                           cmp.json_path: json.dumps(json_safe(payload), indent=1)})
    return cmp
