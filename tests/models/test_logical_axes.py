"""Logical axes (SPEC §3 "parameters annotated with logical axes, T5X style"): every parameter
carries a full-rank logical PartitionSpec of known axis names, and under axis rules every layer's
activations (q/k/v/attention output [batch, heads, length, kv], MLP hidden [batch, length, mlp],
residual stream [batch, length, embed], logits [batch, length, vocab]) become sharding
constraints; without rules in scope there are none."""

from __future__ import annotations

import collections

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from mnmt.models import partitioning, zoo
from mnmt.models.decoder_only import DecoderOnlyModel
from mnmt.models.encoder_decoder import EncoderDecoderModel
from mnmt.models.test_utils import make_batch, tiny_config

RULES = partitioning.standard_logical_axis_rules()
KNOWN = {name for name, _ in RULES}
# the logical axes each kind of parameter must carry (T5X's names)
EXPECTED = {"embedding": ("vocab", "embed"), "logits_dense": ("embed", "vocab"),
            "query": ("embed", "heads", "kv"), "key": ("embed", "heads", "kv"),
            "value": ("embed", "heads", "kv"), "out": ("heads", "kv", "embed"),
            "wi_0": ("embed", "mlp"), "wi_1": ("embed", "mlp"), "wi": ("embed", "mlp"),
            "wo": ("mlp", "embed"), "scale": ("embed",),
            "rel_embedding": ("heads", "relpos_buckets")}


def _model(config):
    return DecoderOnlyModel(config) if config.is_decoder_only else EncoderDecoderModel(config)


def _batch(config, b=3, ilen=9, tlen=7):
    batch = make_batch(np.random.default_rng(0), b=b, ilen=ilen, tlen=tlen,
                       vocab=config.vocab_size)
    if config.is_decoder_only:
        batch = {k: v for k, v in batch.items() if k != "encoder_input_tokens"}
    return batch


@pytest.mark.parametrize("config", [
    tiny_config(),
    tiny_config(mlp_activations=("relu",), shared_embedding=False),           # Ghorbani options
    tiny_config(logits_via_embedding=True),
    tiny_config(architecture="decoder_only", num_encoder_layers=0, mlp_activations=("gelu",)),
    zoo.get_config("mini-1"),
], ids=["t5.1.1", "ghorbani-like", "tied-logits", "decoder-only", "mini-1"])
def test_every_parameter_has_full_rank_logical_axes(config):
    model = _model(config)
    batch = _batch(config)
    shapes = jax.eval_shape(lambda: model.init_params(jax.random.PRNGKey(0), batch))
    axes = model.params_logical_axes(batch)
    flat_shapes = jax.tree_util.tree_flatten_with_path(shapes)[0]
    flat_axes = jax.tree_util.tree_leaves(axes, is_leaf=lambda x: isinstance(x, P))
    assert len(flat_shapes) == len(flat_axes) > 0
    seen = set()
    for (path, leaf), spec in zip(flat_shapes, flat_axes, strict=True):
        where = jax.tree_util.keystr(path)
        assert isinstance(spec, P), where
        assert len(spec) == leaf.ndim, f"{where}: {spec} for shape {leaf.shape}"
        assert all(a in KNOWN for a in spec), f"{where}: {spec} has an axis without a rule"
        name = getattr(path[-1], "key", str(path[-1]))
        if name in EXPECTED:
            assert tuple(spec) == EXPECTED[name], where
            seen.add(name)
    assert {"embedding", "out", "wo", "scale", "rel_embedding"} <= seen


def _constraints(closed_jaxpr):
    """(shape, mesh PartitionSpec) of every sharding constraint, nested jaxprs included."""
    out = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "sharding_constraint":
                out.append((tuple(eqn.outvars[0].aval.shape), eqn.params["sharding"].spec))
            for v in eqn.params.values():
                for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(closed_jaxpr.jaxpr)
    return collections.Counter(out)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_every_layer_constrains_its_activations(arch):
    E, D, b, il, tl, h, kv, mlp, vocab, emb = 1, 2, 3, 9, 7, 2, 8, 32, 37, 16
    if arch == "decoder_only":
        config = tiny_config(architecture="decoder_only", num_encoder_layers=0,
                             num_decoder_layers=D)
        E = 0
    else:
        config = tiny_config(num_encoder_layers=E, num_decoder_layers=D)
    model = _model(config)
    batch = _batch(config, b, il, tl)
    params = jax.jit(model.init_params)(jax.random.PRNGKey(0), batch)

    def fwd(p):
        return model.apply(p, batch)

    assert not _constraints(jax.make_jaxpr(fwd)(params))   # no rules in scope: no-ops
    with partitioning.activation_context(partitioning.make_mesh(1, 1), RULES):
        c = _constraints(jax.make_jaxpr(fwd)(params))
    heads, mlp_spec, embed_spec = (P("data", "model", None, None), P("data", None, "model"),
                                   P("data", None, None))
    # q, k, v and the attention output of every self-attention; the cross-attention's q and out
    # on the decoder length, its k and v on the encoder length
    assert c[((b, h, tl, kv), heads)] == 4 * D + 2 * D * (E > 0)
    if E:
        assert c[((b, h, il, kv), heads)] == 4 * E + 2 * D
        assert c[((b, il, mlp), mlp_spec)] == E
        assert c[((b, il, emb), embed_spec)] >= 2 * E + 1   # after attention and MLP, + norm
    assert c[((b, tl, mlp), mlp_spec)] == D                 # one MLP hidden per decoder layer
    assert c[((b, tl, emb), embed_spec)] >= (3 if E else 2) * D + 1
    assert c[((b, tl, vocab), mlp_spec)] == 1               # logits: vocab over 'model'
