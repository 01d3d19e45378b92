"""Adaptive studies: the design grows round by round until its target is certain or its compute
is spent (`StudySpec.adaptive`).

Round 0 trains the initial design: the grid's runs at the `adaptive_initial` weights of the
target pair, all sizes. Every later round fits the design law — L(N, D) across weights in
Kaplan's form on log L (`fitting.design.laws.kaplan_across_weights`) at each cooled-down budget of
a run — to what is trained, and reads the 95 % interval of E (the pair's L∞) as the report
computes it (`report_interval`); while the interval of log E is wider than ±`adaptive_threshold`,
the next batch is picked from the pool's untrained runs by the drop in E's predicted variance per
FLOP (`fitting.design.plan.plan_batch`) within a round's share of the budget, recorded in
OUT/design/rounds.jsonl, then trained. A record is written before its batch
trains, so a study killed mid-round resumes the same batch and no finished run trains again;
each record holds its fit's normalised parameters, the next round's warm start, so a resumed
study fits as the uninterrupted one. The budget counts the design runs only: the seed repeats
and held-out runs train besides it (round 0's record says their FLOPs). `grow` runs any design
with this class's interface: mnmt.study.adaptive_objective's targets the K-pair
recommendation's objective instead of E.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fitting.design.laws import kaplan_across_weights
from fitting.design.parametric import ParametricFit, ParametricLaw
from fitting.design.plan import current_target_sd, plan_batch
from fitting.design.simulate import FitSettings
from fitting.intervals.predictive import quantile
from mnmt.study.design_pool import non_embedding, run_flops, size_step_flops, tokens_per_step
from mnmt.study.spec import RunSpec, StudySpec, branch_runs, expand, run_id, with_branches
from mnmt.study.spec_checks import StudyError, mixture_weights

__all__ = ["ROUNDS_FILE", "AdaptiveDesign", "Estimate", "append_round", "estimate_text",
           "fixed_runs", "grow", "measure_from_runs", "plan_rounds", "plan_text", "read_rounds",
           "report_interval", "trained_runs"]

ROUNDS_FILE = Path("design") / "rounds.jsonl"

#: what `grow` calls to train runs (their cool-down branches included) and to read, per run id,
#: the target pair's cooled-down loss at each budget of `AdaptiveDesign.budgets`
Train = Callable[[list[RunSpec]], None]
Measure = Callable[[list[RunSpec]], dict[str, np.ndarray]]
#: what `grow` stops on: E's interval from the trained design runs (None: the design law's own)
Interval = Callable[[list[RunSpec]], "Estimate"]


@dataclass(frozen=True)
class Estimate:
    """E of the target pair with its 95 % interval.

    Attributes:
        E: the estimate of L∞ (of the target named ``name``: "E", or "J" for a mixture's
            objective, mnmt.study.adaptive_objective); ``lo``, ``hi``: its 95 % interval (NaN:
            none).
        source: what made it: "design law" (:meth:`AdaptiveDesign.fit`: linearised, t_{0.975,
            dof} · sd of log E from the fit's own residual variance) or "L(N, D) across
            weights" (the report's interval: resampled runs and forms, :func:`report_interval`).
        detail: the parts of its width (sd_log and dof; or sd_resample, sd_forms, sd_total) or
            why there is none.
    """

    E: float
    lo: float
    hi: float
    source: str
    detail: dict = field(default_factory=dict)
    name: str = "E"

    @property
    def relative(self) -> float:
        """Half-width of the interval of log E: log(hi / lo) / 2 (≈ the share of E for narrow
        intervals; ∞ without an interval)."""
        ok = self.lo > 0 and self.hi > 0 and np.isfinite([self.lo, self.hi]).all()
        return float(np.log(self.hi / self.lo) / 2) if ok else float("inf")

    def as_json(self) -> dict:
        """The estimate as strict JSON (None where a number is not finite)."""
        def number(x: float) -> float | None:
            return float(x) if np.isfinite(x) else None

        return {self.name: number(self.E), "lo95": number(self.lo), "hi95": number(self.hi),
                "relative": number(self.relative), "source": self.source, **self.detail}


def rounds_path(out: Path) -> Path:
    return Path(out) / ROUNDS_FILE


def read_rounds(out: Path) -> list[dict]:
    """The recorded rounds, in order. A last line cut short (the process killed while writing
    it) is ignored; any other line that is not a JSON object is an error naming file and line."""
    path = rounds_path(out)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: a write cut short
                break
            raise StudyError(f"{path}:{number}: not a JSON round record ({err}); "
                             "move the file away to plan again") from err
        if not isinstance(record, dict) or "round" not in record:
            raise StudyError(f"{path}:{number}: expected a round record (an object with 'round')")
        records.append(record)
    return records


def append_round(out: Path, record: dict) -> None:
    """Append one record as a line, flushed to disk before returning. A last line left without
    its newline by an earlier kill is judged as `read_rounds` judges it: a whole record is kept
    (its newline added), a torn one cut off — so every record read is a record kept."""
    path = rounds_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = ""
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):
            last = text[text.rfind("\n") + 1:]
            try:
                json.loads(last)
                prefix = "\n"
            except json.JSONDecodeError:
                with open(path, "r+", encoding="utf-8") as f:
                    f.truncate(len(text[:text.rfind("\n") + 1].encode("utf-8")))
    with open(path, "a", encoding="utf-8") as f:
        f.write(prefix + json.dumps(record, sort_keys=True, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def target_pair(spec: StudySpec) -> str:
    """`adaptive_pair`, or the first pair (the spec's checks refuse a pair not in the study)."""
    return spec.adaptive.adaptive_pair or spec.pairs[0]


def fixed_runs(spec: StudySpec) -> tuple[list[RunSpec], list[RunSpec]]:
    """(seed repeats, held-out runs): trained whatever the design picks — the seed repeats
    first (they measure σ_seed), the held-out runs last (they judge the predictions)."""
    repeats = {(size, tuple(sorted(mixture_weights(spec.pairs, w).items())), seed)
               for size, w, seed in spec.seed_repeats}
    runs = expand(spec)
    return ([r for r in runs if (r.size, tuple(sorted(r.weights.items())), r.seed) in repeats],
            [r for r in runs if r.heldout])


def grid_design_runs(spec: StudySpec) -> list[RunSpec]:
    """The design runs the full grid would train (not held out, not seed repeats): the
    compute `adaptive_budget` is a multiple of."""
    repeats, held = fixed_runs(spec)
    skip = {r.run_id for r in (*repeats, *held)}
    return [r for r in expand(spec) if r.run_id not in skip]


def candidate_runs(spec: StudySpec) -> list[RunSpec]:
    """The grid's design runs (not held out, not seed repeats) and those of `adaptive_sizes` at
    the grid's weights and seeds: what a design may pick from."""
    repeats, held = fixed_runs(spec)
    fixed = {r.run_id for r in (*repeats, *held)}  # never a design run, whatever its size
    extra = [RunSpec(run_id=run_id(size, weights, seed), size=size, weights=weights, seed=seed)
             for size in spec.adaptive.adaptive_sizes if size not in spec.sizes
             for weights in (mixture_weights(spec.pairs, w) for w in spec.weights)
             for seed in spec.seeds]
    return [r for r in [*grid_design_runs(spec), *extra] if r.run_id not in fixed]


def pool_runs(spec: StudySpec) -> list[RunSpec]:
    """The candidate runs (`candidate_runs`) that train the target pair."""
    pair = target_pair(spec)
    return [r for r in candidate_runs(spec) if r.weights.get(pair, 0) > 0]


def pool_costs(spec: StudySpec, pool: Sequence[RunSpec]) -> tuple[dict[str, float], float]:
    """({run id: FLOPs with its branches} of ``pool``, the budget: `adaptive_budget` × the FLOPs
    of the grid's design runs)."""
    grid = grid_design_runs(spec)
    flops = {size: size_step_flops(spec, size) for size in {r.size for r in (*pool, *grid)}}
    return ({r.run_id: run_flops(spec, r, flops[r.size]) for r in pool},
            spec.adaptive.adaptive_budget * sum(run_flops(spec, r, flops[r.size]) for r in grid))


def initial_runs(spec: StudySpec, pool: Sequence[RunSpec]) -> list[RunSpec]:
    """Round 0: the pool's runs whose target-pair weight is one of `adaptive_initial` (empty:
    the middle one of the pool's weights), every size."""
    pair = target_pair(spec)
    weights = sorted({r.weights[pair] for r in pool})
    wanted = spec.adaptive.adaptive_initial or (weights[len(weights) // 2],)
    chosen = [r for r in pool if r.size in spec.sizes
              and any(abs(r.weights[pair] - w) < 1e-9 for w in wanted)]
    if not chosen:
        raise StudyError(f"StudySpec.adaptive_initial: no run of the grid has {pair} weight in "
                         f"{list(wanted)}; the grid's weights of {pair}: {weights}")
    return chosen


class AdaptiveDesign:
    """The design of one adaptive study: its pool, every run's inputs and cost, and the law."""

    def __init__(self, spec: StudySpec) -> None:
        self.spec, self.pair = spec, target_pair(spec)
        self.pool = pool_runs(spec)
        self.budgets = {r.run_id: self.budget_steps(r) for r in self.pool}
        counts = {len(b) for b in self.budgets.values()}
        if len(counts) != 1:
            raise StudyError("StudySpec.adaptive: every run of the pool must have the same number "
                             f"of cooled-down budgets (cool-down branches); got {sorted(counts)}")
        self.weights = sorted({r.weights[self.pair] for r in self.pool})
        self.law: ParametricLaw = kaplan_across_weights(len(self.weights), counts.pop())
        self.cost, self.budget = pool_costs(spec, self.pool)
        self.n = {size: float(non_embedding(spec, size))
                  for size in {r.size for r in (*self.pool, *grid_design_runs(spec))}}
        self.tokens_per_step = float(tokens_per_step(spec))
        # inputs in units of the smallest size and the smallest budget: parameters of order 1
        self.scale = (min(self.n.values()),
                      self.tokens_per_step * min(min(b) for b in self.budgets.values()))

    def initial(self) -> list[RunSpec]:
        """Round 0's runs (`initial_runs`); a StudyError when they alone cost more than the
        budget."""
        runs = self.round_zero_runs()
        cost = sum(self.cost[r.run_id] for r in runs)
        if cost > self.budget * (1 + 1e-9):
            raise StudyError(f"StudySpec.adaptive_budget: round 0 ({len(runs)} runs at "
                             f"{self.initial_what}) costs {cost:.3g} FLOPs, more than the "
                             f"budget of {self.budget:.3g}; raise adaptive_budget or start from "
                             "fewer weights")
        return runs

    #: what round 0 trains, as its refusal names it
    initial_what = "adaptive_initial weights"
    #: why a round's batch was chosen, as its record says
    why = "largest drop in E's variance per FLOP"
    @property
    def label(self) -> str:
        """The target, as the progress line names it."""
        return f"{self.pair} E"

    @property
    def goal(self) -> str:
        """The target, as the plan names it."""
        return f"{self.pair}'s E"

    def round_zero_runs(self) -> list[RunSpec]:
        """The design runs of round 0 (`initial_runs`)."""
        return initial_runs(self.spec, self.pool)

    def fixed_first(self) -> list[RunSpec]:
        """The runs outside the design that round 0 trains first: the seed repeats (the held-out
        runs are the caller's, after the rounds)."""
        return fixed_runs(self.spec)[0]

    def fixed_cost(self) -> float:
        """FLOPs of the seed repeats and the held-out runs: trained whatever the design picks,
        outside `budget` (which counts the design runs only)."""
        repeats, held = fixed_runs(self.spec)
        return sum(run_flops(self.spec, r, size_step_flops(self.spec, r.size))
                   for r in (*repeats, *held))

    def study_measure(self, runs_dir: Path, eval_set: str) -> Measure:
        """What a study measures its runs by (`measure_from_runs`)."""
        return measure_from_runs(self, runs_dir, eval_set)

    def study_interval(self, runs_dir: Path, eval_set: str) -> Interval:
        """What a study stops on: the report's own interval of E (`report_interval`)."""
        return report_interval(self, runs_dir, eval_set, fixed_runs(self.spec)[0])

    def header(self) -> dict:
        """What every round record repeats: the target, its threshold, the budget, the law."""
        return {"pair": self.pair, "target": "E", "threshold": self.spec.adaptive.adaptive_threshold,
                "budget": self.budget, "law": self.law.name, "params": list(self.law.param_names),
                "weights": self.weights, "scale": list(self.scale)}

    def round_budget(self, spent: float) -> float:
        """A round's FLOPs: `adaptive_round` of the budget, at least the dearest pool run (so
        that every run can be picked), at most what is left."""
        share = self.spec.adaptive.adaptive_round * self.budget
        return min(self.budget - spent, max(share, max(self.cost.values())))

    def budget_steps(self, run: RunSpec) -> list[int]:
        """The steps at which ``run`` measures a cooled-down loss: its branches' ends, its end."""
        return sorted([b.branch_step + b.cooldown_steps for b in branch_runs(self.spec, run)]
                      + [self.spec.steps_for(run.size)])

    def inputs(self, run: RunSpec) -> np.ndarray:
        """(N, D_1 … D_k, p): non-embedding parameters and the target tokens at each budget, in
        units of ``scale``, and the index of the run's weight of the target pair."""
        n0, d0 = self.scale
        weight = self.weights.index(run.weights[self.pair])
        return np.array([self.n[run.size] / n0,
                         *(self.tokens_per_step * s / d0 for s in self.budgets[run.run_id]),
                         weight], float)

    def target(self, fit: ParametricFit, estimate: Estimate | None = None
               ) -> tuple[np.ndarray, ParametricLaw | None]:
        """(the target's inputs, the law whose value there is the target; None: the design law):
        log E at N = D = ∞."""
        return self.target_inputs(), None

    def target_inputs(self) -> np.ndarray:
        """N = D = ∞ at every budget: the law's value there is log E."""
        k = len(next(iter(self.budgets.values())))
        return np.array([[np.inf] * (1 + k) + [0.0]])

    def fit(self, runs: Sequence[RunSpec], losses: dict[str, np.ndarray], round_number: int,
            warm: np.ndarray | None = None) -> tuple[ParametricFit, Estimate]:
        """The design law fitted on ``runs`` and E's interval."""
        X = np.stack([self.inputs(r) for r in runs])
        y = np.log(np.stack([np.asarray(losses[r.run_id], float) for r in runs]))
        fit = FitSettings().fit(self.law, X, y, np.random.default_rng(round_number), warm=warm)
        sd = float(current_target_sd(fit, X, self.target_inputs())[0])
        dof = self.dof(len(runs))
        E, half = float(fit.theta[0]), quantile(0.95, dof) * sd
        return fit, Estimate(E, E * float(np.exp(-half)), E * float(np.exp(half)), "design law",
                             {"sd_log": sd, "dof": dof})

    def dof(self, n_runs: int) -> int:
        """Residual degrees of freedom of the law on ``n_runs`` runs: their values (a run gives
        one per budget) less the parameters, at least 1."""
        k = len(next(iter(self.budgets.values())))
        return max(n_runs * k - self.law.n_params, 1)

    def planned_relative(self, fit: ParametricFit, runs: Sequence[RunSpec]) -> float:
        """t_{0.975, dof} · the linearised sd of log E once ``runs`` are measured, at ``fit``."""
        X = np.stack([self.inputs(r) for r in runs])
        return quantile(0.95, self.dof(len(runs))) * float(
            current_target_sd(fit, X, self.target_inputs())[0])

    def plan(self, fit: ParametricFit, trained: Sequence[RunSpec], budget: float,
             estimate: Estimate | None = None) -> list[dict]:
        """The next batch within ``budget`` FLOPs: pool runs not trained, by E's variance drop
        per FLOP; each pick with its cost and E's predicted half-width once trained
        (``estimate``: the stop rule's, unused here)."""
        done = {r.run_id for r in trained}
        free = [r for r in self.pool if r.run_id not in done]
        if not free:
            return []
        X_done = np.stack([self.inputs(r) for r in trained])
        X_pool = np.stack([self.inputs(r) for r in free])
        cost = np.array([self.cost[r.run_id] for r in free])
        X_target, target_law = self.target(fit, estimate)
        picks = plan_batch(fit, X_done, X_pool, cost, X_target, budget, target_law=target_law)
        out = []
        for i, p in enumerate(picks):
            width = quantile(0.95, self.dof(len(trained) + i + 1)) * float(p.target_sd[0])
            out.append({"run_id": free[p.index].run_id, "cost": p.cost,
                        "predicted_relative": width if np.isfinite(width) else None})
        return out


def measure_from_runs(design: AdaptiveDesign, runs_dir: Path, eval_set: str) -> Measure:
    """A `Measure` reading each run's and its branches' last evaluated loss of the target pair
    on ``eval_set`` from their run directories (the cooled-down loss at each budget)."""
    from fitting.data.rundirs import read_run_dir  # noqa: PLC0415  pandas

    read: dict[str, float] = {}  # a finished run's loss does not change: read once

    def last_loss(run_id: str) -> float:
        if run_id in read:
            return read[run_id]
        table = read_run_dir(str(runs_dir / run_id))
        rows = table[(table["metric"] == "loss") & (table["pair"] == design.pair)
                     & (table["eval_set"] == eval_set)]
        if rows.empty:
            raise StudyError(f"{runs_dir / run_id}: no {design.pair} loss on {eval_set!r} to fit "
                             "the design on")
        read[run_id] = float(rows.sort_values("step")["value"].iloc[-1])
        return read[run_id]

    def measure(runs: list[RunSpec]) -> dict[str, np.ndarray]:
        out = {}
        for run in runs:
            parts = sorted(branch_runs(design.spec, run), key=lambda b: b.branch_step)
            out[run.run_id] = np.array([*(last_loss(b.run_id) for b in parts),
                                        last_loss(run.run_id)])
        return out

    return measure


#: the design law's prior point for a plan made before any run (scaled units, every weight
#: alike): a loss a few times E at the smallest size and budget
PLAN_PRIOR = {"E": 1.0, "alpha": 0.5, "beta": 0.5, "A": 1.0, "B": 1.0}


def plan_rounds(design: AdaptiveDesign, rounds: int, noise: float,
                prior: dict[str, float] | None = None) -> list[dict]:
    """The first ``rounds`` rounds as the study would pick them if every run measured what the
    law at ``prior`` predicts (`PLAN_PRIOR` by default; keys E, alpha, beta, A, B, in the
    design's scaled units) with relative noise ``noise``: per round its runs, FLOPs and the
    interval of log E predicted once it is trained (linearised: nothing is fitted). The plan
    ends, as the study would stop, after the first round whose interval is within
    `adaptive_threshold`."""
    values = {**PLAN_PRIOR, **(prior or {})}
    unknown = sorted(set(values) - set(PLAN_PRIOR))
    if unknown:
        raise StudyError(f"plan prior: unknown parameter(s) {unknown}; known: "
                         f"{', '.join(PLAN_PRIOR)}")
    w = len(design.weights)
    theta = np.array([values["E"], values["alpha"], values["beta"], *[values["A"]] * w,
                      *[values["B"]] * w])
    u = design.law.to_u(theta)
    fit = ParametricFit(design.law, u, design.law.to_theta(u), 0.0, 0, noise ** 2)
    trained = design.initial()
    spent = sum(design.cost[r.run_id] for r in trained)
    out = [{"round": 0, "chosen": [r.run_id for r in trained], "cost": spent, "spent": spent,
            "relative": design.planned_relative(fit, trained)}]
    threshold = design.spec.adaptive.adaptive_threshold
    for number in range(1, rounds + 1):
        if out[-1]["relative"] is not None and out[-1]["relative"] <= threshold:
            break  # the study stops here
        picks = design.plan(fit, trained, design.round_budget(spent))
        if not picks:
            break
        picked = {p["run_id"] for p in picks}
        trained = trained + [r for r in design.pool if r.run_id in picked]  # in pool order
        cost = sum(p["cost"] for p in picks)
        spent += cost
        out.append({"round": number, "chosen": [p["run_id"] for p in picks], "cost": cost,
                    "spent": spent, "relative": picks[-1]["predicted_relative"]})
    return out


def report_interval(design: AdaptiveDesign, runs_dir: Path, eval_set: str,
                    also: Sequence[RunSpec] = ()) -> Interval:
    """An `Interval`: the report's own — L(N, D) across weights fitted on the trained runs (and
    ``also``: the seed repeats, whose σ_seed its backtest reads) as the report fits it, and the
    95 % interval of the target pair's E it gives (resampled runs and forms)."""
    from fitting.data.rundirs import collect_runs  # noqa: PLC0415  pandas
    from fitting.report.sections.chinchilla import (  # noqa: PLC0415
        fit_cooled_law,
        largest_size_seed_noises,
    )
    from fitting.report.view import prepare_view  # noqa: PLC0415

    source = "L(N, D) across weights"

    def interval(trained: list[RunSpec]) -> Estimate:
        runs = with_branches(design.spec, [*also, *trained])
        view = prepare_view(collect_runs([str(runs_dir / r.run_id) for r in runs]),
                            eval_set=eval_set)
        fit, _, why = fit_cooled_law(view, noise_rel=largest_size_seed_noises(view.seeds)[0]
                                     or None)
        e = ((fit.meta.get("E_predictive") or {}).get(design.pair) or {}) if fit else {}
        if "lo95" not in e:
            failed = ((fit.meta.get("failed_pairs") or {}).get(design.pair)
                      or fit.meta.get("predictive_failed")) if fit else None
            return Estimate(float(e.get("estimate", np.nan)), np.nan, np.nan, source,
                            {"why": e.get("error") or failed or why or "no interval"})
        return Estimate(e["estimate"], e["lo95"], e["hi95"], source,
                        {k: e[k] for k in ("sd_resample", "sd_forms", "sd_total") if k in e})

    return interval


def grow(design: AdaptiveDesign, out: Path, train: Train, measure: Measure,
         interval: Interval | None = None, log: Callable[[str], None] = print) -> list[dict]:
    """Run the adaptive study's rounds (resuming recorded ones) and return every record: round
    0 trains the seed repeats and the initial design; each later round records its state
    (``before``: E's interval from ``interval``, the design law's own when None; ``design``:
    the design law's), then either stops (``stop``: "threshold", "budget" or "pool") or records
    its batch (``chosen``, ``costs``, ``predicted_relative``: the design law's interval of log E
    predicted once the batch up to each pick is trained) and trains it."""
    by_id = {r.run_id: r for r in design.pool}
    records = read_rounds(out)
    first = design.fixed_first()
    if not records:
        initial = design.initial()
        cost = sum(design.cost[r.run_id] for r in initial)
        append_round(out, {**design.header(), "round": 0, "chosen": [r.run_id for r in initial],
                           "inputs": [design.inputs(r).tolist() for r in initial],
                           "costs": [design.cost[r.run_id] for r in initial], "cost": cost,
                           "spent": cost, "why": "initial design",
                           "outside_budget": design.fixed_cost()})
        records = read_rounds(out)
    trained: list[RunSpec] = []
    for record in records:  # recorded rounds: trained (again only what is unfinished)
        unknown = [i for i in record["chosen"] if i not in by_id]
        if unknown:
            raise StudyError(f"{rounds_path(out)}: round {record['round']} chose {unknown[0]!r}, "
                             "not a run of this study's pool")
        batch = [by_id[i] for i in record["chosen"]]
        train(([*first] if record["round"] == 0 else []) + batch)
        trained += batch
        if "stop" in record:
            return records
    warm = recorded_start(design, records)
    while True:
        number = records[-1]["round"] + 1
        fit, own = design.fit(trained, measure(trained), number, warm)
        estimate = interval(trained) if interval else own
        warm = fit.u
        spent = sum(design.cost[r.run_id] for r in trained)
        log(f"design round {number}: {design.label} {estimate_text(estimate)}, "
            f"{spent / design.budget:.0%} of the budget spent")
        stop = _stop_reason(design.spec, design, estimate, spent)
        picks = [] if stop else design.plan(fit, trained, design.round_budget(spent), estimate)
        if not stop and not picks:
            stop = "budget" if len(trained) < len(design.pool) else "pool"
        record = {**design.header(), "round": number, "before": estimate.as_json(),
                  "design": own.as_json(), "spent": spent, "theta": fit.theta.tolist(),
                  "u": fit.u.tolist()}
        if stop:
            append_round(out, {**record, "chosen": [], "stop": stop})
            return read_rounds(out)
        cost = sum(p["cost"] for p in picks)
        append_round(out, {**record, "chosen": [p["run_id"] for p in picks],
                           "inputs": [design.inputs(by_id[p["run_id"]]).tolist() for p in picks],
                           "costs": [p["cost"] for p in picks], "cost": cost,
                           "spent": spent + cost,
                           "predicted_relative": [p["predicted_relative"] for p in picks],
                           "why": design.why})
        batch = [by_id[p["run_id"]] for p in picks]
        train(batch)
        trained += batch
        records = read_rounds(out)


def recorded_start(design: AdaptiveDesign, records: Sequence[dict]) -> np.ndarray | None:
    """The last recorded fit's normalised parameters, the next fit's warm start (as the
    uninterrupted study's was, so a resumed study fits as it would have): its ``u`` exactly; a
    record without one (written before ``u`` was recorded) through ``to_u`` of its theta."""
    fitted = [r for r in records if r.get("theta")]
    if not fitted:
        return None
    if fitted[-1].get("u") is not None:
        return np.asarray(fitted[-1]["u"], float)
    return design.law.to_u(np.asarray(fitted[-1]["theta"], float))


def plan_text(design: AdaptiveDesign) -> str:
    """One line: what the adaptive study will do."""
    a = design.spec.adaptive
    return (f"adaptive: {len(design.pool)} design runs to pick from, {design.goal} to "
            f"±{a.adaptive_threshold:.0%} (95 %) within {design.budget:.3g} FLOPs "
            f"({a.adaptive_budget:g}× the grid's design runs; the seed repeats and held-out runs, "
            f"{design.fixed_cost():.3g} FLOPs, besides), rounds of "
            f"{a.adaptive_round:.0%}; rounds recorded in {ROUNDS_FILE}")


def estimate_text(estimate: Estimate) -> str:
    """E with its 95 % interval, or 'not identified' when it spans more than a factor e² (the
    half-width of log E above 1)."""
    if not estimate.relative <= 1:
        return (f"= {estimate.E:.4g}, not identified yet (no 95 % interval, or one wider than "
                f"×e^±1; {estimate.source})")
    return (f"= {estimate.E:.4g}, 95 % [{estimate.lo:.4g}, {estimate.hi:.4g}] "
            f"(±{estimate.relative:.1%} in log; {estimate.source})")


def trained_runs(design: AdaptiveDesign, records: Sequence[dict]) -> list[RunSpec]:
    """The design runs the recorded rounds chose, in order."""
    by_id = {r.run_id: r for r in design.pool}
    return [by_id[i] for record in records for i in record["chosen"]]


def _stop_reason(spec: StudySpec, design: AdaptiveDesign, estimate: Estimate,
                 spent: float) -> str:
    """"threshold" when E is as certain as asked, "budget" when the budget is spent, else ""."""
    if estimate.relative <= spec.adaptive.adaptive_threshold:
        return "threshold"
    if spent >= design.budget * (1 - 1e-9):
        return "budget"
    return ""
