"""The jitted training step and its sharded state (T5X's partitioner + train-state roles).

The state is a dict of arrays: `step` (int32), `params`, `opt_state` and `rng` (a raw uint32
key). Parameters are placed with `NamedSharding`s derived from the model's logical axes and the
logical-axis rules (`mnmt.models.partitioning`); the optimizer's parameter-shaped slots follow their
parameter, its factored and scalar slots are replicated; the batch is split over the `data`
mesh axis.

The loss is the model's objective normalised per target token (Fernandes et al. 2023 §3.1 train
on token-normalised cross-entropy with Adafactor). With gradient accumulation the batch is cut
into `k` micro-batches whose gradients are combined with weights n_i / Σn (n_i = target tokens of
micro-batch i), which gives exactly the gradient of the per-token loss of the whole batch.
Micro-batch i takes rows i, i + k, i + 2k, …, so each device's share of the `data`-sharded batch
splits into its own k micro-batches (no rows move between devices). With `loss_tiles` > 1 the
model computes its output projection and loss a slice of the sequence at a time
(`mnmt.models.losses.tiled_cross_entropy_terms`): same loss, smaller logits temporaries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

State = dict[str, Any]


@dataclasses.dataclass
class StepFunctions:
    """Jitted functions of one training setup and the shardings they use."""

    mesh: Mesh
    init: Callable[[jax.Array], State]
    step: Callable[[State, Mapping[str, jax.Array]], tuple[State, dict[str, jax.Array]]]
    state_shardings: Any
    batch_sharding: NamedSharding
    replicated: NamedSharding
    params_shardings: Any
    abstract_state: Any            # ShapeDtypeStructs with shardings: the target of a restore
    group_size: int = 0            # > 0: state and batch carry a leading axis of that many runs
    member_abstract_state: Any = None  # one run's abstract state (grouped: a slice of the above)


def _opt_state_shardings(tx, abstract_params, params_shardings, abstract_opt, replicated):
    """Parameter-shaped optimizer slots take their parameter's sharding; the rest replicate."""

    def for_param_slot(slot, param, sharding):
        return sharding if getattr(slot, "shape", None) == param.shape else replicated

    try:
        return optax.tree_map_params(
            tx,
            lambda slot, param, sharding: for_param_slot(slot, param, sharding),
            abstract_opt,
            abstract_params,
            params_shardings,
            transform_non_params=lambda _: replicated,
            is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct),
        )
    except Exception:  # an optimizer whose state tree tree_map_params cannot follow
        return jax.tree.map(lambda _: replicated, abstract_opt)


def build_step_functions(
    model: Any,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    mesh: Mesh,
    params_shardings_fn: Callable[[Any], Any],
    example_batch: Mapping[str, np.ndarray],
    *,
    label_smoothing: float,
    z_loss: float,
    accumulation_steps: int = 1,
    context: Callable[[], Any] | None = None,
    group_size: int = 0,
    loss_tiles: int = 1,
    num_pairs: int = 0,
) -> StepFunctions:
    """Build the sharded `init(rng)` and `step(state, batch)` functions.

    With `group_size=K > 0` the functions train K runs of the same model at once (one compiled
    program, `jax.vmap` over a leading run axis of the state, the batch and the metrics): `init`
    takes K keys, `step` a batch of shape [K, rows, …]; the run axis is never sharded, so each
    run's slice is placed exactly as a single run's state would be.

    `params_shardings_fn(abstract_params)` returns the parameters' NamedShardings;
    `example_batch` fixes the batch's shapes (one global batch of numpy arrays); `context()`
    (e.g. `mnmt.models.partitioning.activation_context(mesh, rules)`) is entered around every call so
    the model's logical activation constraints apply when the functions are traced.

    The step's metrics: `loss` (the training objective per target token), `cross_entropy`,
    `grad_norm`, `learning_rate`, `finite` and the `token_sums` of the batch; with
    `num_pairs` K > 0 the batch carries `decoder_task_ids` and the metrics the sums of each of
    its K pairs (from the per-token losses of the same forward pass).
    """
    replicated = NamedSharding(mesh, P())
    batch_sharding = NamedSharding(mesh, P("data"))
    init_batch = {k: np.zeros((1,) + tuple(v.shape[1:]), v.dtype) for k, v in example_batch.items()}

    def init_params(rng):
        return model.init_params(rng, init_batch)

    abstract_params = jax.eval_shape(init_params, jax.random.PRNGKey(0))
    params_shardings = params_shardings_fn(abstract_params)
    abstract_opt = jax.eval_shape(tx.init, abstract_params)
    opt_shardings = _opt_state_shardings(tx, abstract_params, params_shardings, abstract_opt,
                                         replicated)
    state_shardings = {
        "step": replicated,
        "params": params_shardings,
        "opt_state": opt_shardings,
        "rng": replicated,
    }

    def init(rng):
        param_rng, dropout_rng = jax.random.split(rng)
        params = init_params(param_rng)
        return {
            "step": jnp.zeros((), jnp.int32),
            "params": params,
            "opt_state": tx.init(params),
            "rng": dropout_rng,
        }

    batch_size = next(iter(example_batch.values())).shape[0]
    k = int(accumulation_steps)
    if k < 1 or batch_size % k:
        raise ValueError(f"gradient accumulation steps {k} must divide the batch size {batch_size}")

    if not isinstance(loss_tiles, int) or loss_tiles < 1:
        raise ValueError(f"loss_tiles must be a positive integer (1 = untiled), got {loss_tiles!r}")
    tiling = {"loss_tiles": loss_tiles} if loss_tiles > 1 else {}  # 1: the untiled path as before

    def objective(params, batch, rng):
        loss, aux = model.loss_fn(params, batch, rng, label_smoothing=label_smoothing,
                                  z_loss=z_loss, **tiling)
        sums = token_sums(aux, batch, num_pairs)
        # Scale back to a token sum so micro-batches combine exactly (module docstring).
        return loss * sums["num_tokens"], sums

    grad_fn = jax.value_and_grad(objective, has_aux=True)

    def compute_grads(params, batch, rng):
        """(Σ training loss, `token_sums` of the batch, Σ gradients) over its k micro-batches."""
        if k == 1:
            (loss_sum, sums), grads = grad_fn(params, batch, rng)
            return loss_sum, sums, grads
        # [rows] -> [rows/k, k] -> [k, rows/k]: micro-batch i = rows i, i+k, … (module docstring)
        micro = jax.tree.map(
            lambda x: jnp.swapaxes(x.reshape((x.shape[0] // k, k) + x.shape[1:]), 0, 1), batch)

        def body(carry, inputs):
            i, mb = inputs
            out = grad_fn(params, mb, jax.random.fold_in(rng, i))
            return jax.tree.map(jnp.add, carry, out), None

        init_carry = ((jnp.zeros(()), zero_sums(num_pairs)), jax.tree.map(jnp.zeros_like, params))
        ((loss_sum, sums), grads), _ = jax.lax.scan(body, init_carry, (jnp.arange(k), micro))
        return loss_sum, sums, grads

    def step(state, batch):
        rng = jax.random.fold_in(state["rng"], state["step"])
        loss_sum, sums, grads = compute_grads(state["params"], batch, rng)
        denom = jnp.maximum(sums["num_tokens"], 1.0)
        grads = jax.tree.map(lambda g: g / denom, grads)
        loss = loss_sum / denom
        grad_norm = optax.global_norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        updates, new_opt = tx.update(grads, state["opt_state"], state["params"])
        new_params = optax.apply_updates(state["params"], updates)
        # A non-finite step is not undone here: the host stops the run without saving it, so the
        # last checkpoint on disk stays the last good state.
        new_state = {
            "step": state["step"] + 1,
            "params": new_params,
            "opt_state": new_opt,
            "rng": state["rng"],
        }
        metrics = {
            "loss": loss,
            "cross_entropy": sums["cross_entropy_sum"] / denom,
            "grad_norm": grad_norm,
            "learning_rate": schedule(state["step"]),
            "finite": finite,
            **sums,
            "num_tokens": sums["num_tokens"].astype(jnp.int32),
        }
        if num_pairs:
            metrics["pair_num_tokens"] = sums["pair_num_tokens"].astype(jnp.int32)
        return new_state, metrics

    member_abstract_state = jax.tree.map(
        lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh),
        jax.eval_shape(init, jax.random.PRNGKey(0)), state_shardings)
    jit_init = jax.jit(init, out_shardings=state_shardings)
    if group_size:
        # The runs' steps run one after another inside one program (lax.map): XLA:CPU's batched
        # matmuls (what jax.vmap would make of the stacked parameters) are slower per run than
        # the single run's 2-D matmuls, while the loop's per-step host work is paid once.
        single_step, member_init = step, jit_init

        def step(state, batch):
            return jax.lax.map(lambda args: single_step(*args), (state, batch))

        state_shardings = jax.tree.map(with_run_axis, state_shardings)
        batch_sharding = with_run_axis(batch_sharding)

        def jit_init(keys):  # each run initialised exactly as it would be alone, then stacked
            return stack_members([member_init(key) for key in keys], state_shardings)

    jit_step = _step_program(step, schedule, (state_shardings, batch_sharding),
                             (state_shardings, replicated), replicated)
    if context is not None:  # trace inside the mesh + logical-axis-rules scope
        jit_init, jit_step = _in_context(jit_init, context), _in_context(jit_step, context)
    abstract_state = member_abstract_state
    if group_size:
        abstract_state = jax.tree.map(
            lambda a, sh: jax.ShapeDtypeStruct((group_size,) + a.shape, a.dtype, sharding=sh),
            member_abstract_state, state_shardings)
    return StepFunctions(mesh=mesh, init=jit_init, step=jit_step, state_shardings=state_shardings,
                         batch_sharding=batch_sharding, replicated=replicated,
                         params_shardings=params_shardings, abstract_state=abstract_state,
                         group_size=int(group_size), member_abstract_state=member_abstract_state)


def token_sums(aux: Mapping[str, jax.Array], batch: Mapping[str, jax.Array],
               num_pairs: int = 0) -> dict[str, jax.Array]:
    """A batch's target-token sums from the model's `loss_fn` aux: Σ −log p
    (`cross_entropy_sum`, no smoothing, no z-loss) and the target tokens (`num_tokens`, loss
    weight > 0); with `num_pairs` K > 0 also per pair, `pair_cross_entropy_sum` and
    `pair_num_tokens` [K], pair k holding the tokens whose `decoder_task_ids` is k + 1 (0 is
    padding: in none). Pair k's mean is L_k = Σ_{t ∈ k} nll_t / N_k, and the batch's mean
    Σ_t nll_t / Σ_t 1 = Σ_k N_k L_k / Σ_k N_k, its token-weighted mean over the pairs."""
    counted = (jnp.asarray(batch["decoder_loss_weights"]) > 0).astype(jnp.float32)
    sums = {"cross_entropy_sum": aux["cross_entropy_sum"], "num_tokens": jnp.sum(counted)}
    if num_pairs:
        if "decoder_task_ids" not in batch:
            raise KeyError(f"the step sums the loss of {num_pairs} pairs but the batch has no "
                           f"decoder_task_ids feature (got {sorted(batch)}); make the inputs "
                           "with TrainInputs(task_ids=True)")
        # one-hot [batch, length, K]; id 0 (padding) is one_hot(-1): all zeros. A multiply and
        # a sum, not a matmul, so no reduced-precision matmul pass touches the sums.
        onehot = jax.nn.one_hot(jnp.asarray(batch["decoder_task_ids"]) - 1, num_pairs)
        sums["pair_cross_entropy_sum"] = jnp.sum(
            aux["cross_entropy_tokens"][..., None] * onehot, axis=(0, 1))
        sums["pair_num_tokens"] = jnp.sum(counted[..., None] * onehot, axis=(0, 1))
    return sums


def zero_sums(num_pairs: int = 0) -> dict[str, jax.Array]:
    """`token_sums` of nothing: the start of a sum over micro-batches."""
    sums = {"cross_entropy_sum": jnp.zeros(()), "num_tokens": jnp.zeros(())}
    if num_pairs:
        sums.update(pair_cross_entropy_sum=jnp.zeros((num_pairs,)),
                    pair_num_tokens=jnp.zeros((num_pairs,)))
    return sums


def with_run_axis(sharding: NamedSharding) -> NamedSharding:
    """The sharding of a stacked (grouped) array: a leading, unsharded run axis."""
    return NamedSharding(sharding.mesh, P(None, *sharding.spec))


def member_slice(tree: Any, index: int) -> Any:
    """Run `index`'s part of a grouped (stacked) state or metrics tree."""
    return jax.tree.map(lambda x: x[index], tree)


def stack_members(trees: list[Any], shardings: Any) -> Any:
    """Stack per-run trees (e.g. restored checkpoints) into one grouped tree placed by
    `shardings` (the grouped state's shardings)."""
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
    return jax.device_put(stacked, shardings)


def single_device_step_functions(model: Any, example_batch: Mapping[str, np.ndarray], *,
                                  label_smoothing: float = 0.0, z_loss: float = 0.0,
                                  accumulation_steps: int = 1,
                                  num_pairs: int = 0,
                                  schedule: optax.Schedule | None = None) -> StepFunctions:
    """`build_step_functions` on a 1×1 mesh with T5X's standard logical-axis rules and the
    default optimiser (Adafactor driven by `schedule`, by default the rsqrt schedule at learning
    rate 1.0, 100 warm-up steps): the trainer's own step, for benchmarks and notebooks that time
    or inspect one step."""
    from mnmt.models import partitioning
    from mnmt.training.optimizer import make_optimizer, rsqrt_schedule

    mesh = partitioning.make_mesh(1, 1)
    rules = partitioning.standard_logical_axis_rules()
    schedule = schedule or rsqrt_schedule(1.0, 100)

    def shardings(_abstract_params):
        axes = model.params_logical_axes({k: v[:1] for k, v in example_batch.items()})
        return partitioning.logical_to_shardings(axes, mesh, rules)

    return build_step_functions(model, make_optimizer(schedule), schedule, mesh, shardings,
                                example_batch, label_smoothing=label_smoothing, z_loss=z_loss,
                                accumulation_steps=accumulation_steps, num_pairs=num_pairs)


class _WithInputs:
    """A jitted step called as ``step(state, batch)`` (and lowered so) with the schedule's
    inputs placed once as its last argument."""

    def __init__(self, jitted: Callable, inputs: jax.Array) -> None:
        self.jitted, self.inputs = jitted, inputs

    def __call__(self, state, batch):
        return self.jitted(state, batch, self.inputs)

    def lower(self, state, batch):
        return self.jitted.lower(state, batch, self.inputs)


def _step_program(step: Callable, schedule: Any, in_shardings: tuple, out_shardings: tuple,
                  replicated: NamedSharding) -> Callable:
    """`step` jitted (its state donated). A schedule with a cool-down's `inputs`
    (`mnmt.training.optimizer.Schedule`) gets them as an argument of the program, not as
    constants in it: the cool-down branches of a run (which differ in T and c only) share one
    compiled step instead of compiling one each."""
    inputs = getattr(schedule, "inputs", None)
    if inputs is None:
        return jax.jit(step, in_shardings=in_shardings, out_shardings=out_shardings,
                       donate_argnums=(0,))

    def step_with_inputs(state, batch, ends):
        with schedule.bound(ends):
            return step(state, batch)

    jitted = jax.jit(step_with_inputs, in_shardings=(*in_shardings, replicated),
                     out_shardings=out_shardings, donate_argnums=(0,))
    return _WithInputs(jitted, jax.device_put(inputs, replicated))


def _in_context(fn: Callable, context: Callable[[], Any]) -> Callable:
    def wrapped(*args, **kwargs):
        with context():
            return fn(*args, **kwargs)

    return wrapped


def put_global_batch(batch: Mapping[str, np.ndarray], sharding: NamedSharding,
                     global_rows: int | None = None, *, group_size: int = 0) -> dict[str, jax.Array]:
    """Place this process's rows of a batch as one global array split over the `data` axis.

    With one process `batch` is the whole batch; with several, each passes its own rows
    (per-host input sharding) and `global_rows` is the global batch size. A grouped batch
    (`group_size` > 0) has a leading run axis before the rows.
    """
    out = {}
    lead = 1 if group_size else 0
    for name, x in batch.items():
        x = np.asarray(x)
        shape = None if global_rows is None else \
            x.shape[:lead] + (global_rows,) + x.shape[lead + 1:]
        out[name] = jax.make_array_from_process_local_data(sharding, x, shape)
    return out


def put_replicated_batch(batch: Mapping[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
    """Place a batch that every process holds in full (evaluation) split over `data`.

    Non-numeric entries (e.g. the raw `targets_text` strings of an eval batch) are left out.
    """
    out = {}
    for name, x in batch.items():
        x = np.asarray(x)
        if x.dtype == object or x.dtype.kind in "USO":
            continue
        out[name] = jax.make_array_from_callback(x.shape, sharding, lambda idx, x=x: x[idx])
    return out
