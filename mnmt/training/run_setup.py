"""Everything a training run derives from its `TrainConfig` before the first step.

Builds the model, mesh and shardings, the input pipelines, and the run.json of
docs/reference/metrics_schema.md; checks an existing MODEL_DIR's run.json for compatibility.

The zoo size's architecture picks the model and the batch format: `EncoderDecoderModel` with
T5X EncDecFeatureConverter rows, or `DecoderOnlyModel` with Caillaut-format rows of
`inputs + targets` tokens (`mnmt.data.formats`); the latter needs a vocabulary with the
separator `</src>` and fails at once, naming the vocabulary, without it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gin
import jax
import numpy as np

from fitting.data import io
from fitting.data.rundirs import final_losses_from_rows
from fitting.data.schema import RUN_JSON, SCHEMA_VERSION
from mnmt.models import accounting
from mnmt.training import branches, run_files
from mnmt.training.config import (
    ACTIVATION_DTYPES,
    PARTITIONING_RULES,
    REMAT_POLICIES,
    OptimizerConfig,
    TrainConfig,
)
from mnmt.training.optimizer import COOLDOWN_SHAPES

# Eval batches shared by the runs of one process (a study trains many runs on the same eval sets).
_EVAL_BATCHES: dict[tuple, list[dict[str, np.ndarray]]] = {}
_EVAL_CACHE_ENTRIES = 64


@dataclasses.dataclass
class RunSetup:
    run_id: str
    existing: dict[str, Any] | None
    run_json: dict[str, Any]
    first_eval_set: str
    model: Any
    model_config: Any
    mesh: Any
    params_shardings_fn: Callable[[Any], Any]
    example_batch: dict[str, np.ndarray]
    global_rows: int
    vocabulary: Any
    flops_per_step: float
    make_inputs: Callable[[], Any]
    context: Callable[[], Any]
    eval_batches: Callable[..., Iterator[dict[str, np.ndarray]]]


def resolve_batch_size(config: TrainConfig, data_parallel: int = 1) -> int:
    """Rows per step: `batch_size`, or `batch_tokens // targets length` when tokens are given,
    rounded down (with a warning) to a multiple of `data_parallel`, the data-parallel size of
    the run (see `data_parallel_size`), so that no batch reaches the mesh unsplittable."""
    return accounting.rows_per_step(config.inputs.batch_size, config.inputs.batch_tokens,
                                    config.inputs.feature_lengths["targets"], data_parallel)


def data_parallel_size(data_axis: int, input_shards: int) -> int:
    """What every global batch must be a multiple of: the mesh's data axis (all hosts' devices)
    splits its rows, and each of the input shards (one per host by default) reads an equal share."""
    return math.lcm(int(data_axis), int(input_shards))


def _validate(config: TrainConfig) -> None:
    problems = []
    positive = {"train_steps": config.train_steps, "log_every": config.log_every,
                "eval.period": config.eval.period, "eval.batch_size": config.eval.batch_size,
                "checkpoint.period": config.checkpoint.period,
                "decode.beam_size": config.decode.beam_size, "loss_tiles": config.loss_tiles}
    for name, v in positive.items():
        if not isinstance(v, int) or v < 1:
            problems.append(f"{name} must be a positive int, got {v!r}")
    if not isinstance(config.stop_step, int) or config.stop_step < 0:
        problems.append(f"stop_step must be an int ≥ 0 (0: train to train_steps), got "
                        f"{config.stop_step!r}")
    problems.extend(_probe_problems(config))
    n = config.decode.num_examples
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        problems.append(f"decode.num_examples must be an int ≥ 0 (0: the whole eval split), "
                        f"got {n!r}")
    fl = config.inputs.feature_lengths
    if not isinstance(fl, dict) or set(fl) != {"inputs", "targets"}:
        problems.append("inputs.feature_lengths must be {'inputs': int, 'targets': int}, "
                        f"got {fl!r}")
    if not config.eval.tasks:
        problems.append("eval.tasks is empty: give at least one pair -> task name")
    if not config.eval.sets:
        problems.append("eval.sets is empty")
    if config.activation_dtype not in ACTIVATION_DTYPES:
        problems.append(f"activation_dtype must be one of {ACTIVATION_DTYPES}, "
                        f"got {config.activation_dtype!r}")
    if config.remat_policy not in REMAT_POLICIES:
        problems.append(f"remat_policy must be one of {REMAT_POLICIES}, "
                        f"got {config.remat_policy!r}")
    problems.extend(rules_problems(config))
    if config.cooldown_shape not in COOLDOWN_SHAPES:
        problems.append(f"cooldown_shape must be one of {COOLDOWN_SHAPES}, "
                        f"got {config.cooldown_shape!r}")
    try:
        branches.branch_steps(config)
    except branches.BranchError as err:
        problems.append(str(err))
    if not config.model_dir:
        problems.append("model_dir is empty")
    if not io.is_remote(config.vocabulary_path) and not os.path.exists(config.vocabulary_path):
        problems.append(f"vocabulary_path {config.vocabulary_path!r} does not exist")
    if problems:
        raise ValueError("invalid TrainConfig: " + "; ".join(problems))


def _probe_problems(config: TrainConfig) -> list[str]:
    """What is wrong with `eval.probe_every` (an int ≥ 0) and `eval.probe_examples` (≥ 1)."""
    every, examples = config.eval.probe_every, config.eval.probe_examples
    problems = []
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        problems.append(f"eval.probe_every must be an int ≥ 0 (0: no probe), got {every!r}")
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        problems.append(f"eval.probe_examples must be a positive int, got {examples!r}")
    return problems


def rules_problems(config: TrainConfig) -> list[str]:
    """What is wrong with `partitioning_rules` / `logical_axis_rules` (an empty list: nothing)."""
    if config.partitioning_rules not in PARTITIONING_RULES:
        return [f"partitioning_rules must be one of {PARTITIONING_RULES}, "
                f"got {config.partitioning_rules!r}"]
    if config.logical_axis_rules and config.partitioning_rules != "standard":
        return [f"partitioning_rules must be 'standard' when logical_axis_rules are given "
                f"(they replace the named set), got {config.partitioning_rules!r}"]
    return []


def _mixture_weights(config: TrainConfig) -> dict[str, float]:
    if config.mixture_weights is not None:
        return {k: float(v) for k, v in config.mixture_weights.items()}
    import seqio  # noqa: PLC0415

    provider = seqio.get_mixture_or_task(config.inputs.mixture_or_task_name)
    if isinstance(provider, seqio.Mixture):
        rates = {t.name: provider.get_rate(t) for t in provider.tasks}
    else:
        rates = {provider.name: 1.0}
    total = sum(rates.values()) or 1.0
    weights = {p: 0.0 for p in config.eval.tasks}
    for pair, rate in zip(pair_names(config, list(rates)), rates.values(), strict=True):
        weights[pair] = rate / total
    return weights


def pair_names(config: TrainConfig, tasks: Sequence[str]) -> list[str]:
    """The pair of each SeqIO task, as run.json's `mixture.weights` and the `task` of the
    metrics rows name it: its key in `eval.tasks`, else the task's own name."""
    task_to_pair = {t: p for p, t in config.eval.tasks.items()}
    return [task_to_pair.get(t, t) for t in tasks]


def model_config_for(config: TrainConfig, vocab_size: int | None = None) -> Any:
    """The zoo size's `T5Config` with the run's dropout, activation dtype and remat policy."""
    from mnmt.models import zoo  # noqa: PLC0415

    return zoo.get_config(config.model_size, vocab_size,
                          dropout_rate=float(config.dropout_rate),
                          dtype=config.activation_dtype, remat_policy=config.remat_policy)


def make_model(model_config: Any) -> Any:
    """`EncoderDecoderModel` or `DecoderOnlyModel`, as the config's architecture says."""
    if model_config.is_decoder_only:
        from mnmt.models.decoder_only import DecoderOnlyModel  # noqa: PLC0415

        return DecoderOnlyModel(model_config)
    from mnmt.models.encoder_decoder import EncoderDecoderModel  # noqa: PLC0415

    return EncoderDecoderModel(model_config)


def family_of(model_config: Any, size: str) -> str:
    fam = getattr(model_config, "family", "") or ""
    return fam or size.split("-", 1)[0]


def build_run_json(config: TrainConfig, run_id: str, model_config: Any, vocab_size: int,
                   batch_size: int) -> dict[str, Any]:
    counts = accounting.param_counts(model_config)
    shape_fields = ("num_encoder_layers", "num_decoder_layers", "emb_dim", "num_heads",
                    "head_dim", "mlp_dim", "vocab_size", "dropout_rate", "mlp_activations",
                    "architecture", "logits_via_embedding", "dtype")
    shape = {f: getattr(model_config, f) for f in shape_fields if hasattr(model_config, f)}
    weights = _mixture_weights(config)
    caps = config.mixture_caps if config.mixture_caps is not None else {p: None for p in weights}
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "study": config.study,
        "status": "running",
        "model": {
            "family": family_of(model_config, config.model_size),
            "size": config.model_size,
            "config": shape,
            "params": {k: int(getattr(counts, k)) for k in
                       ("total", "embedding", "non_embedding", "encoder", "decoder")},
            "vocab_size": int(model_config.vocab_size),
        },
        "mixture": {
            "name": config.inputs.mixture_or_task_name,
            "weights": weights,
            "caps": {k: (None if v is None else int(v)) for k, v in caps.items()},
            "tasks": dict(config.eval.tasks),
        },
        "training": {
            "steps": int(config.train_steps),
            "stop_step": int(config.stop_step),
            "batch_size": batch_size,
            "batch_tokens": batch_size * int(config.inputs.feature_lengths["targets"]),
            "feature_lengths": {k: int(v) for k, v in config.inputs.feature_lengths.items()},
            "seed": int(config.seed),
            "learning_rate": float(config.learning_rate),
            "warmup_steps": int(config.warmup_steps),
            "decay": str(config.decay),
            "final_lr_fraction": float(config.final_lr_fraction),
            "optimizer": (config.optimizer or OptimizerConfig()).name,
            "cooldown_steps": int(config.cooldown_steps),
            "cooldown_shape": str(config.cooldown_shape),
            "label_smoothing": float(config.label_smoothing),
            "z_loss": float(config.z_loss),
            "dropout_rate": float(config.dropout_rate),
            "gradient_accumulation_steps": int(config.gradient_accumulation_steps),
            "loss_tiles": int(config.loss_tiles),
            "activation_dtype": str(config.activation_dtype),
            "remat_policy": str(config.remat_policy),
            "partitioning_rules": str(config.partitioning_rules),
            "eval_sets": list(config.eval.sets),
            "mesh_shape": list(config.mesh_shape),
            "num_processes": jax.process_count(),
        },
        "vocabulary": {"path": config.vocabulary_path, "size": int(vocab_size),
                       "sha256": run_files.file_sha256(config.vocabulary_path)},
        "gin_config": gin.config_str(),
        "versions": run_files.package_versions(),
        "extra": dict(config.extra or {}),
        **branch_fields(config),
    }


def branch_fields(config: TrainConfig) -> dict[str, Any]:
    """run.json's branch fields (schema revision 1.2): `branch` on a branch — the parent's run
    id, the step it leaves from and its cool-down steps —, `branch_steps` on a run with branches."""
    if branches.is_branch(config):
        parent = run_files.read_run_json(config.branches.parent_dir) or {}
        parent_id = parent.get("run_id") or os.path.basename(
            os.path.normpath(config.branches.parent_dir))
        return {"branch": {"parent": str(parent_id), "step": int(config.branches.parent_step),
                           "cooldown_steps": int(config.cooldown_steps)}}
    steps = branches.branch_steps(config)
    return {"branch_steps": steps} if steps else {}


def run_mesh(config: TrainConfig) -> Any:
    """The run's (data, model) mesh over every device of the job (`config.mesh_shape`, -1 = the rest)."""
    from mnmt.models import partitioning  # noqa: PLC0415

    data, model = config.mesh_shape
    n = jax.device_count()
    if data == -1 and model == -1:
        raise ValueError("mesh_shape may have at most one -1")
    if data == -1:
        data = n // model
    if model == -1:
        model = n // data
    if data * model != n:
        raise ValueError(f"mesh_shape {tuple(config.mesh_shape)} needs {data * model} devices, "
                         f"this job has {n}")
    return partitioning.make_mesh(data, model)


def build_setup(config: TrainConfig) -> RunSetup:
    """Validate the config, check MODEL_DIR, and build model, mesh and data for `train`."""
    _validate(config)  # before the heavy imports: a bad configuration fails at once
    from mnmt.data import pipeline, vocab  # noqa: PLC0415
    from mnmt.models import (  # noqa: PLC0415
        accounting,
        partitioning,  # noqa: PLC0415
    )
    from mnmt.training.host_inputs import HostInputs  # noqa: PLC0415

    run_id = config.run_id or os.path.basename(os.path.normpath(config.model_dir))
    vocabulary = vocab.get_vocabulary(config.vocabulary_path)
    model_config = model_config_for(config, vocabulary.vocab_size)
    architecture = model_config.architecture
    if model_config.is_decoder_only:  # before anything is written: one line naming the file
        vocab.separator_id(vocabulary, config.vocabulary_path)
    decoder_options = decoder_options_for(config, model_config)
    model = make_model(model_config)
    # The mesh (no compilation yet) fixes the data-parallel size the batch must be a multiple of.
    mesh = run_mesh(config)
    num_shards = config.inputs.shards or jax.process_count()
    batch_size = resolve_batch_size(config, data_parallel_size(mesh.shape["data"], num_shards))
    run_json = build_run_json(config, run_id, model_config, vocabulary.vocab_size, batch_size)

    if jax.process_index() == 0:
        io.makedirs(config.model_dir)
    existing = run_files.read_run_json(config.model_dir)
    if existing is not None:
        run_files.check_compatible(existing, run_json,
                                   run_files.join(config.model_dir, RUN_JSON))

    rules = logical_rules(config)
    lengths = dict(config.inputs.feature_lengths)
    first_pipeline_batch = train_example_batch(batch_size, lengths,
                                               decoder_only=model_config.is_decoder_only)
    params_shardings_fn = make_params_shardings_fn(model, first_pipeline_batch, mesh, rules)
    make_pipeline = functools.partial(pipeline.TrainInputs, architecture=architecture,
                                      cache_dirs=tuple(config.inputs.cache_dirs),
                                      decoder_options=decoder_options, task_ids=True)

    def make_inputs():
        return HostInputs(make_pipeline, mixture_or_task=config.inputs.mixture_or_task_name,
                          feature_lengths=lengths, batch_size=batch_size, seed=config.seed,
                          num_shards=num_shards, process_index=jax.process_index(),
                          process_count=jax.process_count(), prefetch=config.inputs.prefetch)

    data_size = mesh.shape["data"]
    eval_bs = -(-config.eval.batch_size // data_size) * data_size

    def eval_batches(task: str, split: str, with_targets: bool = False):
        """The split's batches; kept in memory after the first pass, for every run of this
        process that evaluates the same task, split, lengths and batch size (building the SeqIO
        pipeline again costs far more than an evaluation of a small model)."""
        if not config.eval.cache_batches:
            return pipeline.eval_batches(task, split, lengths, eval_bs, with_targets=with_targets,
                                         architecture=architecture,
                                         decoder_options=decoder_options)
        key = (task, split, tuple(sorted(lengths.items())), eval_bs, config.vocabulary_path,
               architecture, decoder_options)
        if key not in _EVAL_BATCHES:
            if len(_EVAL_BATCHES) >= _EVAL_CACHE_ENTRIES:
                _EVAL_BATCHES.pop(next(iter(_EVAL_BATCHES)))  # the oldest entry
            _EVAL_BATCHES[key] = list(pipeline.eval_batches(task, split, lengths, eval_bs,
                                                            with_targets=True,
                                                            architecture=architecture,
                                                            decoder_options=decoder_options))
        cached = _EVAL_BATCHES[key]
        if with_targets:
            return iter(cached)
        return iter([{k: v for k, v in b.items() if k != "targets_text"} for b in cached])

    # Per row: encoder-decoder I encoder + T decoder tokens; decoder-only one sequence of I + T
    # tokens (the row length), which forward_flops_terms counts for decoder-only configs.
    flops = accounting.train_flops_per_example(model_config, lengths["inputs"],
                                               lengths["targets"]) * batch_size
    return RunSetup(run_id=run_id, existing=existing, run_json=run_json,
                    first_eval_set=config.eval.sets[0], model=model, model_config=model_config,
                    mesh=mesh, params_shardings_fn=params_shardings_fn,
                    example_batch=first_pipeline_batch, global_rows=batch_size,
                    vocabulary=vocabulary, flops_per_step=float(flops), make_inputs=make_inputs,
                    context=lambda: partitioning.activation_context(mesh, rules),
                    eval_batches=eval_batches)


def decoder_options_for(config: TrainConfig, model_config: Any) -> Any:
    """`InputConfig`'s decoder-only format options (Caillaut et al. 2024 §3.3,
    `mnmt.data.decoder_format.DecoderOptions`). Checked before anything is written: set for an
    encoder-decoder size → ValueError naming the field; `domains` keys must be the run's task or
    pair names; every tag must be a piece of the tasks' vocabulary (the error names the file)."""
    from mnmt.data import decoder_format, mixtures, tasks  # noqa: PLC0415

    options = decoder_format.DecoderOptions.of(config.inputs)
    changed = options.changed_fields()
    if changed and not model_config.is_decoder_only:
        raise ValueError(f"InputConfig.{changed[0]} applies to decoder-only sizes only (Caillaut's "
                         f"format); model_size {config.model_size!r} is encoder-decoder: unset "
                         f"{', '.join('InputConfig.' + f for f in changed)}")
    if changed:
        weights = mixtures.mixture_weights(config.inputs.mixture_or_task_name)
        names = sorted({t for t, w in weights.items() if w > 0} | set(config.eval.tasks.values()))
        pairs = [tasks.get_task_info(t).pair for t in names]
        decoder_format.check_domain_keys(options, [*names, *pairs, *config.eval.tasks])
        decoder_format.task_tags(names, options)
    return options


def logical_rules(config: TrainConfig) -> tuple:
    """The run's logical-axis rules: `config.logical_axis_rules`, or the named set
    `config.partitioning_rules` ("standard": T5X's 1-D rules; "fsdp": parameters over 'data').
    Raises ValueError naming the field for an unknown name."""
    from mnmt.models import partitioning  # noqa: PLC0415

    problems = rules_problems(config)
    if problems:
        raise ValueError(f"invalid TrainConfig: {problems[0]}")
    if config.logical_axis_rules:
        return tuple(config.logical_axis_rules)
    return tuple(partitioning.named_logical_axis_rules(config.partitioning_rules))


def make_params_shardings_fn(model: Any, example: dict[str, np.ndarray], mesh: Any,
                             rules: tuple) -> Callable[[Any], Any]:
    """`params_shardings_fn` of `build_step_functions`: the parameters' NamedShardings from the
    model's logical axes and `rules` on `mesh`."""
    from mnmt.models import partitioning  # noqa: PLC0415

    def params_shardings_fn(_abstract_params):
        axes = model.params_logical_axes({k: v[:1] for k, v in example.items()})
        return partitioning.logical_to_shardings(axes, mesh, rules)

    return params_shardings_fn


def train_example_batch(rows: int, lengths: dict[str, int], *,
                        decoder_only: bool = False) -> dict[str, np.ndarray]:
    """One global training batch of zeros with the packed-batch features TrainInputs yields
    (tokens, loss weights, segment ids and positions, the task ids of the trainer's per-pair
    loss): it fixes the step's shapes.

    Decoder-only: the decoder features only, rows of `inputs + targets` tokens."""
    if decoder_only:
        length = lengths["inputs"] + lengths["targets"]
        batch = {k: np.zeros((rows, length), np.int32) for k in (
            "decoder_input_tokens", "decoder_target_tokens", "decoder_segment_ids",
            "decoder_positions", "decoder_task_ids")}
        batch["decoder_loss_weights"] = np.zeros((rows, length), np.float32)
        return batch
    example = {
        "encoder_input_tokens": np.zeros((rows, lengths["inputs"]), np.int32),
        "decoder_input_tokens": np.zeros((rows, lengths["targets"]), np.int32),
        "decoder_target_tokens": np.zeros((rows, lengths["targets"]), np.int32),
        "decoder_loss_weights": np.zeros((rows, lengths["targets"]), np.float32),
    }
    out = dict(example)
    for side, key in (("encoder", "encoder_input_tokens"), ("decoder", "decoder_target_tokens")):
        out[f"{side}_segment_ids"] = np.zeros_like(example[key])
        out[f"{side}_positions"] = np.zeros_like(example[key])
    out["decoder_task_ids"] = np.zeros_like(example["decoder_target_tokens"])
    return out


def final_losses(model_dir: str, eval_set: str) -> dict[str, float]:
    """pair -> `loss` at the last step that has loss rows for `eval_set` (from metrics.jsonl)."""
    return final_losses_from_rows(run_files.read_metrics(model_dir), eval_set)


def final_metrics(model_dir: str) -> dict[str, float]:
    """`pair/eval_set/metric` -> value at each evaluation series' last step (loss, bleu, chrf)."""
    last: dict[tuple[str, str, str], tuple[int, float]] = {}
    for r in run_files.read_metrics(model_dir):
        if r.get("task") == "all" or r.get("value") is None:
            continue
        key = (r["task"], r["eval_set"], r["metric"])
        if key not in last or int(r["step"]) >= last[key][0]:
            last[key] = (int(r["step"]), float(r["value"]))
    return {"/".join(k): v for k, (_, v) in sorted(last.items())}
