"""Sharding plans checked by compilation: `mnmt-study plan STUDY --mesh DATAxMODEL --device-memory-gib G`.

For each distinct model size of a study (the runs of one size share one plan), one training step
at the study's real batch is lowered and compiled for a (data, model) mesh of simulated CPU host
devices, from abstract inputs only: the state's shapes come from `jax.eval_shape`, its shardings
from the trainer's logical-axis rules, and no parameter is ever materialised. The step is the
trainer's own (`mnmt.training.step_functions.build_step_functions`, fed by the helpers of
`mnmt.training.run_setup` and by `mnmt.study.runner.make_train_config`, so the study's dtype,
remat policy, optimizer, batch and logical-axis rule set (`StudySpec.partitioning_rules`, or
`--rules standard|fsdp`) all apply). What is reported per device:

- parameter and optimizer-state bytes: the bytes of each array's shard under its sharding;
- the compiled step's memory (`compiled.memory_analysis()`: arguments + outputs − donated
  aliases + temporaries), or, where the backend gives none, an estimate labelled as such;
- whether that fits in the device memory given (the shards are exact; the temporaries are
  XLA:CPU's for the same partitioned step, an estimate of what a TPU or GPU compile needs);
- FLOPs per step (`compiled.cost_analysis()`, next to `mnmt.models.accounting`'s exact and 6N
  counts), the projected step time at a stated peak (a lower bound: compute only, no
  communication or memory-bound work) and the MFU that bound allows.

Why a subprocess (`python -m mnmt.study.mesh_plan`) per size rather than this process: XLA reads
`--xla_force_host_platform_device_count` once, when jax's CPU backend starts, so the flag must be
in the environment before jax is imported, and the `mnmt-study` process may already have jax
loaded (a plugin, or a caller of `cli.main`). A child per size gets the flag set from the start,
leaves the caller's jax untouched, returns the compiler's memory (gigabytes for the largest sizes)
when it exits, and can be stopped at `--compile-timeout` without losing the sizes already planned.
It costs a jax import (a few seconds) per size.

How to fit: a size whose step does not fit is compiled again with the memory savers in the order
of their cost (the tiled loss, gradient accumulation, remat), stopping at the first that fits
(`mnmt.study.fit_search`). It stays an estimate: XLA:CPU's temporaries for the same partitioned
step.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mnmt.models.configs import PARTITIONING_RULES  # light: no jax
from mnmt.study.fit_search import (
    DEFAULT_HBM_GBPS,
    GIB,
    LOSS_TILE_CHOICES,
    fit_search,
    savers,
)
from mnmt.study.spec import StudySpec, expand
from mnmt.study.stages import UsageError, spec_json

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
DEFAULT_PEAK_TFLOPS = 275.0  # one TPU v4 chip's bf16 peak


# ---------------------------------------------------------------- parent side (no jax)
def parse_mesh(text: str) -> tuple[int, int]:
    """`16x4` -> (16, 4): the data and model axes of the mesh; UsageError naming `--mesh`."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text or "")
    if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise UsageError(f"--mesh: expected DATAxMODEL with positive integers (e.g. 16x4), "
                         f"got {text!r}")
    return int(match.group(1)), int(match.group(2))


def study_sizes(spec: StudySpec) -> list[str]:
    """The study's distinct model sizes, in the order its runs name them (held-out ones too)."""
    return list(dict.fromkeys(run.size for run in expand(spec)))


def with_rules(spec: StudySpec, rules: str | None) -> StudySpec:
    """`spec` with `--rules` (a `PARTITIONING_RULES` name) as its partitioning_rules; None keeps
    the study's own; UsageError naming `--rules` for another value."""
    if rules is None:
        return spec
    if rules not in PARTITIONING_RULES:
        raise UsageError(f"--rules: expected one of {', '.join(PARTITIONING_RULES)}, got {rules!r}")
    return spec.replace(partitioning_rules=rules)


def check_mesh(spec: StudySpec, mesh: tuple[int, int], devices: int | None = None) -> int:
    """Rows per step on `mesh` (the data axis divides them); UsageError naming `--mesh` (or
    `--devices`) when the mesh cannot hold the study: a device count other than DATA×MODEL, a
    model axis that does not divide a size's heads, MLP width or vocabulary, (fsdp rules) a
    data axis that does not divide its embedding width, fewer rows than the data axis."""
    from mnmt.models import accounting, zoo  # light: no jax

    data, model = mesh
    text = f"{data}x{model}"
    if devices is not None and devices != data * model:
        raise UsageError(f"--devices: --mesh {text} needs DATA×MODEL = {data * model} devices, "
                         f"got {devices}")
    for size in study_sizes(spec):
        try:
            config = zoo.get_config(size, spec.vocab_size)
        except ValueError as err:
            raise UsageError(f"StudySpec.sizes: {str(err).splitlines()[0]}") from err
        for field in ("num_heads", "mlp_dim", "vocab_size"):
            if getattr(config, field) % model:
                raise UsageError(f"--mesh {text}: the model axis {model} does not divide {size}'s "
                                 f"{field} = {getattr(config, field)}; expected a model axis that "
                                 "divides the heads, MLP width and vocabulary of every size")
        if spec.compute.partitioning_rules == "fsdp" and config.emb_dim % data:
            raise UsageError(f"--mesh {text}: with fsdp rules the data axis {data} must divide "
                             f"{size}'s emb_dim = {config.emb_dim} (parameters are split over it)")
    try:
        return accounting.rows_per_step(spec.schedule.batch_size, spec.schedule.batch_tokens,
                                        spec.lengths["targets"], data)
    except ValueError as err:
        raise UsageError(f"--mesh {text}: {err}") from err


def child_env(devices: int) -> dict[str, str]:
    """The environment of a planning child: `devices` simulated CPU devices, CPU backend only."""
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    env["XLA_FLAGS"] = " ".join(flags + [f"{DEVICE_COUNT_FLAG}={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def plan_size(spec: StudySpec, size: str, mesh: tuple[int, int], timeout_s: float) -> dict:
    """Compile one size's step in a child process (module docstring); its raw result, or
    {"size", "error"} when it failed, was killed or ran past `timeout_s`."""
    request = json.dumps({"spec": spec_json(spec), "size": size, "mesh": list(mesh)})
    try:
        done = subprocess.run([sys.executable, "-m", "mnmt.study.mesh_plan"], input=request,
                              capture_output=True, text=True, timeout=timeout_s,
                              env=child_env(mesh[0] * mesh[1]))
    except subprocess.TimeoutExpired:
        return {"size": size, "error": f"compilation did not finish within {timeout_s:g} s "
                                       "(--compile-timeout); stopped"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = [line for line in done.stderr.strip().splitlines() if line.strip()]
    why = f"killed by signal {-done.returncode}" if done.returncode < 0 else \
        f"exit status {done.returncode}"
    return {"size": size, "error": f"planning process failed ({why})"
                                   + (f": {tail[-1].strip()[:300]}" if tail else "")}


def summarise(raw: dict, device_memory_gib: float, peak_tflops: float) -> dict:
    """One plan's reported fields (the `--json` objects of docs/reference/cli.md) from the
    child's raw result: per-device total, whether it fits, FLOPs, step-time bound, MFU bound."""
    if "error" in raw:
        return {"size": raw["size"], "error": raw["error"], "per_device_bytes": None,
                "fits": None, "flops_per_step": None}
    devices = raw["devices"]
    memory = raw.get("memory")
    if memory:
        total = (memory["argument_bytes"] + memory["output_bytes"] - memory["alias_bytes"]
                 + memory["temp_bytes"] + memory["generated_code_bytes"])
        source = "compiled.memory_analysis()"
    else:
        total = 2 * raw["state_bytes"] + raw["batch_bytes"]
        source = ("estimate: memory_analysis() returned None; 2 x state + batch, "
                  "activations not counted")
    # XLA's cost analysis counts a loop body once: a step that accumulates gradients or tiles
    # its loss (a scan) would be undercounted, so it gets the exact count instead
    looped = raw.get("gradient_accumulation_steps", 1) > 1 or raw.get("loss_tiles", 1) > 1
    compiled_flops = None if looped else raw.get("compiled_flops_per_device")
    per_device = compiled_flops if compiled_flops else raw["model_flops_per_step"] / devices
    step_time = per_device / (peak_tflops * 1e12)
    return {
        **raw,
        "per_device_bytes": int(total),
        "memory_source": source,
        "device_memory_gib": float(device_memory_gib),
        "fits": bool(total <= device_memory_gib * GIB),
        "flops_per_device": float(per_device),
        "flops_source": "compiled.cost_analysis()" if compiled_flops else
                        "estimate: accounting.train_flops_per_example / devices"
                        + (" (the compiled count sees one pass of the step's loops)"
                           if looped else ""),
        "flops_per_step": float(per_device * devices),
        "peak_tflops": float(peak_tflops),
        "step_time_s_lower_bound": step_time,
        "mfu_upper_bound": raw["model_flops_per_step"] / (devices * per_device),
    }


def plan_study(spec: StudySpec, mesh: tuple[int, int], *, device_memory_gib: float,
               peak_tflops: float = DEFAULT_PEAK_TFLOPS, timeout_s: float = 600.0,
               log: Callable[[str], None] = lambda text: None, rows: int | None = None,
               search: bool = True) -> list[dict]:
    """The summarised plan of every distinct size of `spec` on `mesh`, one child per size; with
    `search` (and `rows`, the rows per step), a size that does not fit gets `fit_search`'s
    answer (`fit_with`, `shortfall_bytes`, `fit_tried`); one that fits, its own settings."""
    plans = []
    sizes = study_sizes(spec)
    for i, size in enumerate(sizes, start=1):
        log(f"plan: compiling {size} ({i}/{len(sizes)}) for mesh {mesh[0]}x{mesh[1]} on "
            f"{mesh[0] * mesh[1]} simulated CPU devices")
        start = time.monotonic()
        plan = summarise(plan_size(spec, size, mesh, timeout_s), device_memory_gib, peak_tflops)
        log(f"plan: {size} " + (f"not planned: {plan['error']}" if "error" in plan else
                                f"compiled in {time.monotonic() - start:.0f} s"))
        if "error" not in plan and search and rows:
            plan.update(size_fit(spec, plan, mesh, rows, device_memory_gib, peak_tflops,
                                 timeout_s, log))
        plans.append(plan)
    return plans


def size_fit(spec: StudySpec, plan: dict, mesh: tuple[int, int], rows: int,
             device_memory_gib: float, peak_tflops: float, timeout_s: float,
             log: Callable[[str], None]) -> dict:
    """`plan`'s own settings when it fits, else `fit_search`'s answer (compiling children)."""
    budget = device_memory_gib * GIB
    if plan["fits"]:
        config = savers(spec)
        return {"fit_with": {**config, "total_bytes": plan["per_device_bytes"],
                             "step_time_bound_s": plan["step_time_s_lower_bound"]},
                "shortfall_bytes": 0}
    log(f"plan: {plan['size']} does not fit ({human_bytes(plan['per_device_bytes'])} > "
        f"{device_memory_gib:g} GiB): searching loss tiles, accumulation, remat")

    def compile_fn(candidate: StudySpec) -> dict:
        return summarise(plan_size(candidate, plan["size"], mesh, timeout_s), device_memory_gib,
                         peak_tflops)

    return fit_search(spec, plan, rows // mesh[0], budget, compile_fn, log)


def human_bytes(n: float | None) -> str:
    """1536 -> '1.5 KiB'."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def human_flops(x: float | None) -> str:
    """3.2e12 -> '3.20 T' (also used for parameter counts: 1.4e5 -> '140.06 K')."""
    if x is None:
        return "-"
    for scale, unit in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f}"


def human_seconds(s: float) -> str:
    """0.0123 -> '12.30 ms'."""
    if s < 1e-3:
        return f"{s * 1e6:.2f} us"
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def format_plans(spec: StudySpec, mesh: tuple[int, int], rows: int, plans: list[dict],
                 device_memory_gib: float, peak_tflops: float) -> str:
    """The table `mnmt-study plan --mesh` prints, with the lines that say what each column is."""
    data, model = mesh
    lengths = spec.lengths
    head = [
        f"study {spec.name}: mesh {data}x{model} (data x model) on {data * model} simulated CPU "
        f"devices; {rows} rows x {lengths['inputs']}/{lengths['targets']} input/target tokens "
        f"per step; activations {spec.compute.activation_dtype}, remat {spec.compute.remat_policy}, "
        f"rules {spec.compute.partitioning_rules}",
        f"per device; fits: total <= {device_memory_gib:g} GiB; step time >= compiled FLOPs per "
        f"device / {peak_tflops:g} TFLOP/s peak per device (default: a TPU v4 chip's bf16 peak)",
    ]
    decoder_only = [p["size"] for p in plans if p.get("decoder_only")]
    if decoder_only:
        head.append(f"decoder-only sizes ({', '.join(decoder_only)}): each row is one sequence "
                    f"of {lengths['inputs'] + lengths['targets']} tokens (inputs + targets)")
    columns = ("size", "params", "params/dev", "opt/dev", "temp/dev", "total/dev", "fits",
               "FLOP/step compiled", "exact", "6N", "step time >=", "MFU <=", "compile")
    table = [columns]
    notes = []
    for p in plans:
        if "error" in p:
            table.append((p["size"], *["-"] * (len(columns) - 2), "not planned"))
            notes.append(f"{p['size']}: not planned: {p['error']}")
            continue
        memory = p.get("memory") or {}
        estimate = "estimate" in p["memory_source"]
        table.append((
            p["size"], human_flops(p["params"]).replace(" ", ""), human_bytes(p["param_bytes"]),
            human_bytes(p["opt_state_bytes"]),
            human_bytes(memory.get("temp_bytes")) if memory else "n/a",
            human_bytes(p["per_device_bytes"]) + (" (est.)" if estimate else ""),
            "yes" if p["fits"] else "NO",
            human_flops(p["flops_per_step"]) + ("" if "compiled" in p["flops_source"] else " (est.)"),
            human_flops(p["model_flops_per_step"]), human_flops(p["six_n_flops_per_step"]),
            human_seconds(p["step_time_s_lower_bound"]), f"{100 * p['mfu_upper_bound']:.0f}%",
            f"{p['compile_s']:.0f} s"))
        if estimate:
            notes.append(f"{p['size']}: memory is an {p['memory_source']}")
    lines = head + align(table)
    lines.append("total/dev = arguments + outputs - donated aliases + temporaries + code "
                 "(compiled.memory_analysis(), per device); FLOP/step compiled = "
                 "cost_analysis() per device x devices; exact / 6N: mnmt.models.accounting; "
                 "step time >= is a lower bound (compute at peak only); MFU <= exact FLOPs / "
                 "(devices x compiled FLOPs per device)")
    return "\n".join(lines + notes + format_fits(plans, rows // data, device_memory_gib))


def align(table: list[tuple]) -> list[str]:
    """Rows of cells as left-aligned columns."""
    widths = [max(len(str(r[i])) for r in table) for i in range(len(table[0]))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in table]


def format_fits(plans: list[dict], rows_per_device: int, device_memory_gib: float) -> list[str]:
    """The "how to fit" lines under the table: one row per size that did not fit (none when
    every size fits, so that output is unchanged)."""
    misfits = [p for p in plans if "error" not in p and not p["fits"] and "fit_tried" in p]
    if not misfits:
        return []
    lines = [f"how to fit in {device_memory_gib:g} GiB per device (searched in cost order, one "
             f"compile each: loss_tiles {'/'.join(map(str, LOSS_TILE_CHOICES))}, then "
             f"gradient_accumulation_steps among the divisors of the {rows_per_device} rows per "
             "data-axis device, then remat_policy minimal, full):"]
    table = [("size", "total/dev before", "loss_tiles", "accumulation", "remat", "total/dev",
              "step time >=", "compiles")]
    for p in misfits:
        fit = p["fit_with"]
        if fit is None:
            table.append((p["size"], human_bytes(p["per_device_bytes"]), "-", "-", "-",
                          f"none fits: {human_bytes(p['shortfall_bytes'])} short", "-",
                          str(len(p["fit_tried"]))))
            continue
        table.append((p["size"], human_bytes(p["per_device_bytes"]), str(fit["loss_tiles"]),
                      str(fit["gradient_accumulation_steps"]), fit["remat_policy"],
                      human_bytes(fit["total_bytes"]), human_seconds(fit["step_time_bound_s"]),
                      str(len(p["fit_tried"]))))
    return lines + align(table) + [
        "step time >= (cost model, mnmt.study.fit_search.step_time_bound): exact FLOPs per device "
        "/ peak x remat factor (minimal 1.1, full 4/3) + the tiled loss's recomputed output "
        "projection + per extra micro-batch 3 x parameter bytes per device at "
        f"{DEFAULT_HBM_GBPS:g} GB/s; an estimate from XLA:CPU's temporaries, like the table",
        "write the chosen settings in the study file: StudySpec.loss_tiles, "
        "StudySpec.gradient_accumulation_steps, StudySpec.remat_policy"]


def plan_command(spec: StudySpec, mesh_text: str, *, device_memory_gib: float | None,
                 peak_tflops: float, devices: int | None, timeout_s: float, as_json: bool,
                 log: Callable[[str], None], rules: str | None = None) -> int:
    """`mnmt-study plan --mesh`: check, plan every size, print the table (or JSON list).
    `rules` ("standard" | "fsdp") overrides the study's partitioning_rules.
    Returns 0 when every size was planned, 1 when some could not be (each one says why)."""
    mesh = parse_mesh(mesh_text)
    spec = with_rules(spec, rules)
    if device_memory_gib is None or not device_memory_gib > 0:
        raise UsageError("--device-memory-gib: expected a positive number of GiB per device with "
                         f"--mesh (e.g. 32), got {device_memory_gib!r}")
    if not peak_tflops > 0:
        raise UsageError(f"--peak-tflops: expected a positive number, got {peak_tflops!r}")
    if not timeout_s > 0:
        raise UsageError(f"--compile-timeout: expected a positive number of seconds, got "
                         f"{timeout_s!r}")
    rows = check_mesh(spec, mesh, devices)
    plans = plan_study(spec, mesh, device_memory_gib=device_memory_gib, peak_tflops=peak_tflops,
                       timeout_s=timeout_s, log=log, rows=rows)
    if as_json:
        print(json.dumps(plans, indent=1))
    else:
        print(format_plans(spec, mesh, rows, plans, device_memory_gib, peak_tflops))
    return 1 if any("error" in p for p in plans) else 0


# ---------------------------------------------------------------- child side (jax)
def shard_bytes(tree: Any) -> int:
    """Bytes one device holds of a tree of sharded `jax.ShapeDtypeStruct`s (each array's shard)."""
    import jax

    return int(sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * leaf.dtype.itemsize
                   for leaf in jax.tree.leaves(tree)))


def memory_fields(compiled: Any) -> dict[str, int] | None:
    """`compiled.memory_analysis()` as plain per-device byte counts; None where unavailable."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    names = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
             "alias_bytes": "alias_size_in_bytes", "temp_bytes": "temp_size_in_bytes",
             "generated_code_bytes": "generated_code_size_in_bytes"}
    return {key: int(getattr(stats, attr, 0) or 0) for key, attr in names.items()}


def compiled_flops(compiled: Any) -> float | None:
    """FLOPs of the compiled (per-device, SPMD-partitioned) program; None where unavailable."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # some backends raise instead of returning nothing
        return None
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    flops = (cost or {}).get("flops")
    return float(flops) if flops and flops > 0 else None


def compile_step(spec: StudySpec, size: str, mesh: tuple[int, int]) -> dict:
    """Lower and compile one training step of `size` for `mesh` (on this process's devices,
    which must number DATA×MODEL); the raw result `summarise` turns into a plan."""
    import jax

    from mnmt.models import accounting, partitioning
    from mnmt.study.runner import StudyData, make_train_config
    from mnmt.training import run_setup
    from mnmt.training.optimizer import make_optimizer, schedule_for
    from mnmt.training.step_functions import build_step_functions

    data, model = mesh
    if jax.device_count() != data * model:
        raise RuntimeError(f"{jax.device_count()} devices, the mesh needs {data * model}: set "
                           f"XLA_FLAGS={DEVICE_COUNT_FLAG}={data * model} before jax starts")
    run = next(r for r in expand(spec) if r.size == size)
    study_data = StudyData(vocabulary_path="", tasks={pair: pair for pair in spec.pairs},
                           irreducible_loss={})
    config = make_train_config(spec, run, study_data, Path("plan") / run.run_id,
                               mixture_name="plan").updated(mesh_shape=(data, model))
    model_config = run_setup.model_config_for(config, spec.vocab_size)
    network = run_setup.make_model(model_config)
    device_mesh = run_setup.run_mesh(config)
    rows = run_setup.resolve_batch_size(config, run_setup.data_parallel_size(data, 1))
    lengths = dict(config.inputs.feature_lengths)
    example = run_setup.train_example_batch(rows, lengths,
                                            decoder_only=model_config.is_decoder_only)
    rules = run_setup.logical_rules(config)
    schedule = schedule_for(config)
    fns = build_step_functions(
        network, make_optimizer(schedule, config.optimizer), schedule, device_mesh,
        run_setup.make_params_shardings_fn(network, example, device_mesh, rules), example,
        label_smoothing=config.label_smoothing, z_loss=config.z_loss,
        accumulation_steps=config.gradient_accumulation_steps, loss_tiles=config.loss_tiles)
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=fns.batch_sharding)
             for k, v in example.items()}
    start = time.monotonic()
    with partitioning.activation_context(device_mesh, rules):  # as the trainer's step is traced
        compiled = fns.step.lower(fns.abstract_state, batch).compile()
    compile_s = time.monotonic() - start
    # positions the output projection scores per row: the targets (decoder-only: the whole row)
    projected = lengths["targets"] + (lengths["inputs"] if model_config.is_decoder_only else 0)
    per_example = accounting.train_flops_per_example(model_config, lengths["inputs"],
                                                     lengths["targets"])
    return {
        "size": size, "mesh": [data, model], "devices": data * model, "rows": rows,
        "decoder_only": bool(model_config.is_decoder_only),
        "activation_dtype": config.activation_dtype, "remat_policy": config.remat_policy,
        "loss_tiles": config.loss_tiles,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "output_projection_flops": float(2 * rows * projected * model_config.emb_dim
                                         * model_config.vocab_size),
        "partitioning_rules": config.partitioning_rules,
        "params": int(accounting.param_counts(model_config).total),
        "param_bytes": shard_bytes(fns.abstract_state["params"]),
        "opt_state_bytes": shard_bytes(fns.abstract_state["opt_state"]),
        "state_bytes": shard_bytes(fns.abstract_state),
        "batch_bytes": shard_bytes(batch),
        "memory": memory_fields(compiled),
        "compiled_flops_per_device": compiled_flops(compiled),
        "model_flops_per_step": float(per_example * rows),
        "six_n_flops_per_step": float(accounting.six_n_flops_per_example(
            model_config, lengths["inputs"], lengths["targets"]) * rows),
        "compile_s": compile_s,
    }


def spec_from_json(fields: dict) -> StudySpec:
    """The StudySpec of `stages.spec_json` (JSON lists back to tuples)."""

    def tuples(value: Any) -> Any:
        return tuple(tuples(v) for v in value) if isinstance(value, list) else value

    return StudySpec.of(**{name: tuples(value) for name, value in fields.items()})


def main() -> int:
    """Child entry point: a JSON request {spec, size, mesh} on stdin, one JSON line on stdout."""
    request = json.loads(sys.stdin.read())
    size = request["size"]
    try:
        result = compile_step(spec_from_json(request["spec"]), size, tuple(request["mesh"]))
    except Exception as err:  # reported as this size's plan, not as a crash of the command
        lines = str(err).strip().splitlines()
        result = {"size": size, "error": f"{type(err).__name__}: {lines[0] if lines else ''}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
