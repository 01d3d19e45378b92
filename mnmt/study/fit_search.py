"""How a model size that does not fit its devices can be made to: the savers `mnmt-study plan
--mesh` searches, their cost model, and the search (`fit_search`).

The savers, in the order they are tried (cheapest first by the cost model, `step_time_bound`):

1. the tiled loss (`StudySpec.loss_tiles`): the output projection + cross-entropy a slice of
   the sequence at a time, so the [tokens, vocabulary] logits and their gradient never exist
   whole (nearly free: one more projection matmul in the backward pass);
2. gradient accumulation (`StudySpec.gradient_accumulation_steps`) over the divisors of the
   rows each data-axis device holds: the smallest first, then the one a line total(k) = fixed +
   varying / k through the totals compiled so far predicts to fit, at least doubling;
3. rematerialisation (`StudySpec.remat_policy`): "minimal", then "full", at the largest
   accumulation tried. When an accumulation fits but costs more than remat at the previous,
   smaller accumulation would, that remat is compiled too and kept if it fits.

Each candidate is compiled by the caller's `compile_fn` (`mnmt.study.mesh_plan` compiles a
child process per candidate); the first that fits ends the search, so the number of compiles
stays small. Light: no jax.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mnmt.study.spec import StudySpec

GIB = 2**30
DEFAULT_HBM_GBPS = 1200.0  # one TPU v4 chip's HBM bandwidth (GB/s), for accumulation's cost
# Tile counts of the loss that fit_search tries (the first that fits is kept; their cost is the
# same: one more projection matmul whatever the count).
LOSS_TILE_CHOICES = (8,)
# Compute of a step with each remat policy relative to none (cost model, not measured):
# "full" recomputes every layer's forward pass (≈ 2 + 4 + 2 = 8 of the 6 FLOPs per parameter and
# token), "minimal" keeps the matmul outputs without batch dimensions and recomputes the
# attention's batched products and the elementwise work.
REMAT_COST = {"none": 1.0, "dots_saveable": 1.05, "minimal": 1.1, "full": 4.0 / 3.0}
REMAT_ORDER = ("minimal", "full")
MAX_ACCUMULATION_COMPILES = 4


def savers(spec: StudySpec) -> dict:
    """The memory-saving settings of `spec` as `fit_with` names them."""
    compute = spec.compute
    return {"gradient_accumulation_steps": int(compute.gradient_accumulation_steps),
            "loss_tiles": int(compute.loss_tiles), "remat_policy": str(compute.remat_policy)}


def step_time_bound(plan: dict, config: dict, *, hbm_gbps: float = DEFAULT_HBM_GBPS) -> float:
    """Lower bound on a step's time with the savers `config`, from an untiled, unaccumulated,
    remat-free `plan` of the same size: the cost model `fit_search` ranks by.

    compute = exact train FLOPs per device (`mnmt.models.accounting`) / peak × REMAT_COST[remat]
    (relative to the plan's own remat policy); a tiled loss (`loss_tiles` > 1) adds one forward
    output projection, 2 × target tokens × emb_dim × vocab FLOPs over all devices, recomputed in
    the backward pass; k-step accumulation adds (k − 1) passes over the parameter shards and a
    float32 gradient accumulator (3 × parameter bytes per device at `hbm_gbps`). Communication
    and memory-bound work are otherwise not counted, as in the plan's own bound.
    """
    peak = plan["peak_tflops"] * 1e12
    compute = plan["model_flops_per_step"] / plan["devices"] / peak
    compute *= REMAT_COST[config["remat_policy"]] / REMAT_COST[plan.get("remat_policy", "none")]
    if config["loss_tiles"] > 1:
        compute += plan["output_projection_flops"] / plan["devices"] / peak
    steps = config["gradient_accumulation_steps"]
    return compute + (steps - 1) * 3 * plan["param_bytes"] / (hbm_gbps * 1e9)


def divisors(n: int) -> list[int]:
    """The divisors of n > 0, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def next_accumulation(options: list[int], tried: list[tuple[int, int]], budget: float) -> int | None:
    """The next accumulation to compile: the smallest untried option ≥ both twice the last tried
    and the k that the line total(k) = fixed + varying/k through the first and last compiled
    (k, total) points predicts to fit in `budget`; None when no option is left."""
    last = tried[-1][0]
    want = 2 * last
    (k0, m0), (k1, m1) = tried[0], tried[-1]
    if k1 > k0 and m1 < m0:
        varying = (m0 - m1) / (1 / k0 - 1 / k1)
        fixed = m0 - varying / k0
        want = max(want, math.ceil(varying / (budget - fixed)) if budget > fixed else options[-1])
    left = [k for k in options if k > last]
    return next((k for k in left if k >= want), left[-1] if left else None)


def fit_search(spec: StudySpec, base: dict, rows_per_device: int, budget_bytes: float,
               compile_fn: Callable[[StudySpec], dict],
               log: Callable[[str], None] = lambda text: None) -> dict:
    """Search the savers for `base` (a summarised plan that does not fit) in cost order (module
    docstring), compiling each candidate with `compile_fn(spec with the savers)`. Returns
    {"fit_with": {savers, total_bytes, step_time_bound_s} or None, "shortfall_bytes" (0 when
    one fits; else the best total's excess), "fit_tried": [{savers, total_bytes}, …]}."""
    tried: list[dict] = []

    def attempt(**change) -> dict | None:
        candidate = spec.replace(**change)
        config = savers(candidate)
        log(f"plan: {base['size']}: trying loss_tiles={config['loss_tiles']}, "
            f"gradient_accumulation_steps={config['gradient_accumulation_steps']}, "
            f"remat_policy={config['remat_policy']}")
        plan = compile_fn(candidate)
        total = plan.get("per_device_bytes")
        tried.append({**config, "total_bytes": total,
                      **({"error": plan["error"]} if "error" in plan else {})})
        log(f"plan: {base['size']}: " + (f"not planned: {plan['error']}" if total is None else
                                         f"{total / GIB:.2f} GiB per device"))
        return plan if total is not None else None

    def result(plan: dict | None, spec_used: StudySpec) -> dict:
        config = savers(spec_used)
        return {"fit_with": {**config, "total_bytes": int(plan["per_device_bytes"]),
                             "step_time_bound_s": step_time_bound(base, config)},
                "shortfall_bytes": 0, "fit_tried": tried}

    def cheaper_remat(missed: StudySpec, found: dict) -> dict | None:
        """A remat policy on `missed` (the last accumulation that did not fit) that fits and
        costs less than `found` (a large accumulation re-reads the parameters many times)."""
        if (missed.compute.gradient_accumulation_steps
                == found["fit_with"]["gradient_accumulation_steps"]):
            return None
        for policy in REMAT_ORDER:
            config = {**savers(missed), "remat_policy": policy}
            if REMAT_COST[policy] <= REMAT_COST[missed.compute.remat_policy] or \
                    step_time_bound(base, config) >= found["fit_with"]["step_time_bound_s"]:
                continue
            plan = attempt(**config)
            if plan and plan["per_device_bytes"] <= budget_bytes:
                return result(plan, missed.replace(remat_policy=policy))
        return None

    best_spec, best_total = spec, base["per_device_bytes"]
    # a study that already tiles its loss (or accumulates) is searched from its own settings on
    for tiles in (LOSS_TILE_CHOICES if spec.compute.loss_tiles == 1 else ()):
        plan = attempt(loss_tiles=tiles)
        if plan and plan["per_device_bytes"] <= budget_bytes:
            return result(plan, spec.replace(loss_tiles=tiles))
        if plan and plan["per_device_bytes"] < best_total:
            best_spec, best_total = spec.replace(loss_tiles=tiles), \
                plan["per_device_bytes"]
    options = [k for k in divisors(rows_per_device) if k > spec.compute.gradient_accumulation_steps]
    points = [(int(spec.compute.gradient_accumulation_steps), best_total)]
    k = options[0] if options else None
    for _ in range(MAX_ACCUMULATION_COMPILES):
        if k is None:
            break
        candidate = best_spec.replace(gradient_accumulation_steps=k)
        plan = attempt(gradient_accumulation_steps=k, loss_tiles=best_spec.compute.loss_tiles)
        if plan is None:
            break
        if plan["per_device_bytes"] <= budget_bytes:
            found = result(plan, candidate)
            return cheaper_remat(best_spec, found) or found
        points.append((k, plan["per_device_bytes"]))
        if plan["per_device_bytes"] < best_total:
            best_spec, best_total = candidate, plan["per_device_bytes"]
        k = next_accumulation(options, points, budget_bytes)
    for policy in REMAT_ORDER:
        if REMAT_COST[policy] <= REMAT_COST[spec.compute.remat_policy]:
            continue  # the study already remats at least this much
        candidate = best_spec.replace(remat_policy=policy)
        plan = attempt(**{**savers(best_spec), "remat_policy": policy})
        if plan and plan["per_device_bytes"] <= budget_bytes:
            return result(plan, candidate)
        if plan and plan["per_device_bytes"] < best_total:
            best_total = plan["per_device_bytes"]
    return {"fit_with": None, "shortfall_bytes": int(best_total - budget_bytes),
            "fit_tried": tried}
