"""Rematerialisation (`T5Config.remat_policy`): each encoder/decoder layer under `nn.remat` with
a `jax.checkpoint` policy. Same parameters, same loss and gradients as without; fewer saved
residuals; decoding without remat; an unknown policy is a one-line error."""

from __future__ import annotations

import contextlib
import io
import re

import jax
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from mnmt.models.configs import REMAT_POLICIES, T5Config
from mnmt.models.decoder_only import DecoderOnlyModel
from mnmt.models.encoder_decoder import EncoderDecoderModel
from mnmt.models.test_utils import make_batch, tiny_config

DEC_FEATURES = ("decoder_input_tokens", "decoder_target_tokens", "decoder_loss_weights")
POLICIES = [p for p in REMAT_POLICIES if p != "none"]
ARCHS = ("encoder_decoder", "decoder_only")


def _model(arch: str, policy: str, **kw):
    if arch == "decoder_only":
        return DecoderOnlyModel(tiny_config(num_encoder_layers=0, architecture="decoder_only",
                                            remat_policy=policy, **kw))
    return EncoderDecoderModel(tiny_config(remat_policy=policy, **kw))


def _batch(arch: str):
    batch = make_batch(np.random.default_rng(0), b=4, ilen=9, tlen=7)
    return {k: batch[k] for k in DEC_FEATURES} if arch == "decoder_only" else batch


def _params(arch: str):
    """Random parameters of the right tree, drawn in numpy (no initialiser to compile)."""
    shapes = jax.eval_shape(lambda: _model(arch, "none").init_params(jax.random.PRNGKey(0),
                                                                      _batch(arch)))
    rng = np.random.default_rng(0)
    return jax.tree.map(
        lambda s: (rng.standard_normal(s.shape) / np.sqrt(s.shape[0])).astype(np.float32), shapes)


# Dropout on for the decoder-only model (the remat'd layers must draw the same masks), off for
# the encoder-decoder (its dropout masks cost more to compile than the rest of the test).
DROPOUT = {"encoder_decoder": 0.0, "decoder_only": 0.1}
_GRADS: dict[str, dict] = {}


def _loss_and_grads(arch: str) -> dict:
    """policy -> (loss, gradients), every policy traced separately, compiled as one program."""
    if arch not in _GRADS:
        batch, params = _batch(arch), _params(arch)
        rng = jax.random.PRNGKey(1) if DROPOUT[arch] else None

        def all_policies(p):
            out = {}
            for policy in REMAT_POLICIES:
                model = _model(arch, policy, dropout_rate=DROPOUT[arch])

                def loss(p, model=model):
                    return model.loss_fn(p, batch, rng, label_smoothing=0.1, z_loss=1e-4)[0]

                out[policy] = jax.value_and_grad(loss)(p)
            return out

        _GRADS[arch] = jax.jit(all_policies)(params)
    return _GRADS[arch]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("policy", POLICIES)
def test_remat_gradients_equal_no_remat(arch, policy):
    """Recomputation repeats the same float32 operations, so only XLA's fusion choices can
    differ: measured max |Δgrad| ≤ 2e-7 (compiled one policy at a time, dropout on or off);
    the tolerance is ten times that."""
    ref_loss, ref_grads = _loss_and_grads(arch)["none"]
    loss, grads = _loss_and_grads(arch)[policy]
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    assert jax.tree.structure(grads) == jax.tree.structure(ref_grads)
    for (path, g), r in zip(jax.tree_util.tree_flatten_with_path(grads)[0],
                            jax.tree.leaves(ref_grads), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=2e-6,
                                   err_msg=jax.tree_util.keystr(path))
    assert any(float(np.abs(g).max()) > 1e-3 for g in jax.tree.leaves(grads))


# The jaxpr primitive of jax.checkpoint ("remat2" in this JAX, "checkpoint" in later ones).
REMAT_PRIMITIVES = {"checkpoint", "remat", "remat2"}


def _remat_count(jaxpr) -> int:
    """Number of jax.checkpoint equations in a jaxpr, sub-jaxprs (jit, loops, cond) included."""
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name in REMAT_PRIMITIVES
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(sub, "eqns"):
                    n += _remat_count(sub)
                elif hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    n += _remat_count(sub.jaxpr)
    return n


def _saved_activation_elements(model, batch) -> int:
    """Elements of the residuals the backward pass keeps that are computed activations
    (parameters and constants excluded), from `jax.ad_checkpoint.print_saved_residuals`."""
    params = jax.eval_shape(lambda: model.init_params(jax.random.PRNGKey(0), batch))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_saved_residuals(lambda p: model.loss_fn(p, batch, None)[0], params)
    total = 0
    for line in out.getvalue().splitlines():
        m = re.match(r"\w+\[([\d,]*)\] output of ", line)
        if m:
            total += int(np.prod([int(d) for d in m.group(1).split(",") if d]))
    return total


@pytest.mark.parametrize("arch", ARCHS)
def test_policies_keep_fewer_residuals(arch):
    """Tracing only: none > dots_saveable > minimal > full in activations kept for backward."""
    batch = _batch(arch)
    kept = {p: _saved_activation_elements(_model(arch, p), batch) for p in REMAT_POLICIES}
    assert kept["none"] > kept["dots_saveable"] > kept["minimal"] > kept["full"] > 0, kept


@pytest.mark.parametrize("arch", ARCHS)
def test_remat_keeps_parameter_tree_and_logical_axes(arch):
    """Checkpoints and partitioning do not depend on the policy."""
    batch = _batch(arch)
    plain = _model(arch, "none")
    ref_shapes = jax.eval_shape(lambda: plain.init_params(jax.random.PRNGKey(0), batch))
    ref_axes = plain.params_logical_axes(batch)
    for policy in POLICIES:
        model = _model(arch, policy)
        shapes = jax.eval_shape(lambda m=model: m.init_params(jax.random.PRNGKey(0), batch))
        assert jax.tree.map(lambda s: (s.shape, s.dtype), shapes) == \
            jax.tree.map(lambda s: (s.shape, s.dtype), ref_shapes)
        assert model.params_logical_axes(batch) == ref_axes


def test_remat_in_training_only():
    """The training gradient rematerialises every layer; beam search runs the encoder once
    (its layers wrapped, which costs nothing without a backward pass) and the decoder's cached
    steps with the plain layers. Traced, not compiled."""
    batch = _batch("encoder_decoder")
    params = jax.eval_shape(lambda: _params("encoder_decoder"))
    for policy in REMAT_POLICIES:
        model = _model("encoder_decoder", policy)
        c = model.config
        layers = c.num_encoder_layers + c.num_decoder_layers
        grad = jax.make_jaxpr(jax.grad(lambda p, m=model: m.loss_fn(p, batch, None)[0]))(params)
        decode = jax.make_jaxpr(lambda p, m=model: m.predict_batch(
            p, batch, beam_size=2, max_decode_length=5))(params)
        if policy == "none":
            assert _remat_count(grad.jaxpr) == _remat_count(decode.jaxpr) == 0
        else:
            assert _remat_count(grad.jaxpr) == layers, policy
            assert _remat_count(decode.jaxpr) == c.num_encoder_layers, policy


def test_unknown_remat_policy_is_a_one_line_error():
    with pytest.raises(ValueError) as err:
        T5Config(remat_policy="sometimes")
    message = str(err.value)
    assert "\n" not in message
    assert "remat_policy" in message and "'sometimes'" in message
    for policy in REMAT_POLICIES:
        assert repr(policy) in message
