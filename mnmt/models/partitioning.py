"""Logical-axis partitioning (T5X's partitioning role): rules, mesh, shardings.

Parameters and activations carry logical axis names ('batch', 'vocab', 'embed', 'mlp', 'heads',
'kv', 'length', 'relpos_buckets', ...). A rule list maps each logical name to a mesh axis
('data', 'model') or to None (replicated). `standard_logical_axis_rules` gives T5X's standard 1-D
data + model parallel mapping (optionally 2-D parameter sharding: 'embed' over 'data');
`fsdp_logical_axis_rules` the parameter-sharded (FSDP-like) set; `named_logical_axis_rules`
picks one by the name `TrainConfig.partitioning_rules` gives; any list of (logical, mesh_axis)
pairs can be passed instead. The mesh uses `AxisType.Auto`, which Flax
Linen's logical constraints need on jax ≥ 0.7 (Explicit axes reject them).

Typical use (see `partitioned_step` in tests/models/test_partitioning.py):

    mesh = make_mesh(data=4, model=2)
    rules = standard_logical_axis_rules()
    param_sh = logical_to_shardings(model.params_logical_axes(batch), mesh, rules)
    with activation_context(mesh, rules):
        step = jax.jit(loss_and_grad, in_shardings=(param_sh, batch_sharding(mesh, batch)))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mnmt.models.configs import PARTITIONING_RULES

LogicalRules = Sequence[tuple[str, str | tuple[str, ...] | None]]


def standard_logical_axis_rules(activation_partitioning_dims: int = 1,
                                parameter_partitioning_dims: int = 1,
                                additional_rules: LogicalRules | None = None
                                ) -> list[tuple[str, Any]]:
    """T5X's standard rules: batch over 'data'; vocab, mlp, heads, joined_kv over 'model'.

    parameter_partitioning_dims=2 also shards 'embed' over 'data' (2-D parameter sharding);
    activation_partitioning_dims=2 shards activations' 'embed' over 'model'.
    `additional_rules` take precedence (listed first).
    """
    if activation_partitioning_dims not in (1, 2) or parameter_partitioning_dims not in (1, 2):
        raise ValueError("activation_partitioning_dims and parameter_partitioning_dims must be "
                         f"1 or 2, got {activation_partitioning_dims}, "
                         f"{parameter_partitioning_dims}")
    rules: list[tuple[str, Any]] = [
        ("batch", "data"),
        ("vocab", "model"),
        ("mlp", "model"),
        ("heads", "model"),
        ("joined_kv", "model"),
        ("kv", None),
        ("length", None),
        ("relpos_buckets", None),
        ("abspos_buckets", None),
        ("layers", None),
        ("stack", None),
        ("mlp_activations", None),
    ]
    if parameter_partitioning_dims == 2:
        rules.append(("embed", "data"))
    elif activation_partitioning_dims == 2:
        rules.append(("embed", "model"))
    else:
        rules.append(("embed", None))
    extra = [tuple(r) for r in (additional_rules or [])]
    for i, r in enumerate(extra):
        if len(r) != 2 or not isinstance(r[0], str):
            raise ValueError(f"additional_rules[{i}] must be (logical_name, mesh_axis), got {r!r}")
    return extra + rules


def fsdp_logical_axis_rules(additional_rules: LogicalRules | None = None
                            ) -> list[tuple[str, Any]]:
    """Parameter-sharded (FSDP-like) rules: the standard set with 'embed' over 'data'.

    Every parameter of the models has at most one 'embed' dim (embeddings, q/k/v/out kernels,
    MLP wi/wo, logits_dense, RMSNorm scales), so each is split over the data-parallel devices as
    well as over 'model' ('vocab', 'mlp', 'heads'), and so are their parameter-shaped optimizer
    slots; only the relative-position tables ('heads', 'relpos_buckets') stay replicated over
    'data'. XLA all-gathers a parameter before its use and reduce-scatters its gradient.

    Activations keep 'batch' on 'data'. They are also annotated with 'embed' (['batch',
    'length', 'embed'] hidden states), and one mesh axis may not shard two dims of one array;
    this is resolved by rule order, as T5X's `parameter_partitioning_dims=2` rules do: Flax
    assigns the rules first-come-first-served, ('batch', 'data') precedes ('embed', 'data'), so
    in an activation 'data' is already taken by 'batch' and its 'embed' dim stays replicated,
    while a parameter (which has no 'batch' dim) gets 'embed' over 'data'. A distinct
    parameter-only name would need every layer re-annotated for the same outcome.
    `additional_rules` take precedence (listed first).
    """
    return standard_logical_axis_rules(parameter_partitioning_dims=2,
                                       additional_rules=additional_rules)


def named_logical_axis_rules(name: str) -> list[tuple[str, Any]]:
    """The rule set called `name`, one of `PARTITIONING_RULES` ("standard", "fsdp")."""
    if name == "standard":
        return standard_logical_axis_rules()
    if name == "fsdp":
        return fsdp_logical_axis_rules()
    raise ValueError(f"partitioning_rules must be one of {PARTITIONING_RULES}, "
                     f"got {name!r}")


def make_mesh(data: int = -1, model: int = 1, devices: Sequence[Any] | None = None) -> Mesh:
    """Mesh(('data', 'model')) with AxisType.Auto over `devices` (default: all devices).

    data=-1 uses every device not taken by `model`.
    """
    devs = list(jax.devices() if devices is None else devices)
    if model < 1:
        raise ValueError(f"model parallelism must be >= 1, got {model}")
    if data == -1:
        if len(devs) % model:
            raise ValueError(f"{len(devs)} devices are not divisible by model={model}")
        data = len(devs) // model
    if data * model != len(devs):
        if data * model > len(devs):
            raise ValueError(f"mesh data={data} × model={model} needs {data * model} devices, "
                             f"only {len(devs)} available")
        devs = devs[: data * model]
    arr = np.asarray(devs, dtype=object).reshape(data, model)
    auto = jax.sharding.AxisType.Auto
    return Mesh(arr, ("data", "model"), axis_types=(auto, auto))


def logical_to_mesh_axes(logical_axes: Any, rules: LogicalRules) -> Any:
    """Tree of logical PartitionSpecs → tree of mesh-axis PartitionSpecs."""
    return nn.logical_to_mesh(logical_axes, rules)


def logical_to_shardings(logical_axes: Any, mesh: Mesh, rules: LogicalRules) -> Any:
    """Tree of logical PartitionSpecs (e.g. `model.params_logical_axes()`) → NamedShardings."""
    mesh_axes = logical_to_mesh_axes(logical_axes, rules)
    return jax.tree_util.tree_map(lambda spec: NamedSharding(mesh, spec), mesh_axes,
                                  is_leaf=lambda x: isinstance(x, PartitionSpec))


def batch_sharding(mesh: Mesh, batch: Mapping[str, Any] | None = None,
                   rules: LogicalRules | None = None) -> Any:
    """Shardings for a batch dict: leading (batch) dim over the axis 'batch' maps to."""
    axis = "data"
    if rules is not None:
        axis = dict(rules).get("batch", "data")
    spec = NamedSharding(mesh, PartitionSpec(axis))
    if batch is None:
        return spec
    return {k: spec for k in batch}


def replicated(mesh: Mesh) -> NamedSharding:
    """A sharding that places a full copy on every device of the mesh."""
    return NamedSharding(mesh, PartitionSpec())


@contextlib.contextmanager
def activation_context(mesh: Mesh, rules: LogicalRules) -> Iterator[None]:
    """Scope in which the models' `nn.with_logical_constraint`s become sharding constraints."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(list(rules)):
        yield


def shard_params(params: Any, shardings: Any) -> Any:
    """Place a parameter tree on the mesh according to `shardings`."""
    return jax.device_put(params, shardings)
