"""The sequence-tiled output projection + loss equals the untiled one (values and gradients)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mnmt.models.decoder_only import DecoderOnlyModel
from mnmt.models.encoder_decoder import EncoderDecoderModel
from mnmt.models.losses import cross_entropy_terms, tiled_cross_entropy_terms
from mnmt.models.test_utils import make_batch, tiny_config


def _project(h, kernel):
    return jnp.einsum("ble,ev->blv", h, kernel)


@pytest.mark.parametrize("tiles", [2, 3, 7])  # 3 leaves a remainder of the 7 positions: padded
@pytest.mark.parametrize("label_smoothing,z_loss", [(0.0, 0.0), (0.1, 1e-2)])
def test_tiled_terms_and_gradients_equal_untiled(tiles, label_smoothing, z_loss):
    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.normal(size=(3, 7, 5)), jnp.float32)
    kernel = jnp.asarray(rng.normal(size=(5, 11)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, 11, size=(3, 7)), jnp.int32)
    w = jnp.asarray(rng.uniform(0.0, 2.0, size=(3, 7)), jnp.float32).at[:, -2:].set(0.0)

    def untiled(h, k):
        logits = _project(h, k)
        loss, nll, zt = cross_entropy_terms(logits, targets, label_smoothing=label_smoothing,
                                            z_loss=z_loss)
        return loss, nll, zt, (jnp.argmax(logits, -1) == targets).astype(jnp.float32)

    def tiled(h, k):
        return tiled_cross_entropy_terms(h, k, targets, _project, tiles=tiles,
                                         label_smoothing=label_smoothing, z_loss=z_loss)

    ref, got = untiled(hidden, kernel), jax.jit(tiled)(hidden, kernel)
    for a, b in zip(ref, got, strict=True):
        assert b.shape == (3, 7)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)

    def objective(fn):
        return lambda h, k: sum(jnp.sum(w * t) for t in fn(h, k)[:3])

    g_ref = jax.grad(objective(untiled), argnums=(0, 1))(hidden, kernel)
    g_got = jax.jit(jax.grad(objective(tiled), argnums=(0, 1)))(hidden, kernel)
    for a, b in zip(g_ref, g_got, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_tiled_backward_never_holds_the_full_logits():
    """The largest float32 array of the tiled gradient's program is one tile's logits."""
    hidden = jnp.zeros((4, 64, 8), jnp.float32)
    kernel = jnp.zeros((8, 512), jnp.float32)
    targets = jnp.zeros((4, 64), jnp.int32)

    def largest(tiles):
        def f(h, k):
            return jnp.sum(tiled_cross_entropy_terms(h, k, targets, _project, tiles=tiles)[0])
        jaxpr = jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(hidden, kernel)
        sizes = []

        def walk(jx):
            for eqn in jx.eqns:
                sizes.extend(int(np.prod(v.aval.shape)) for v in eqn.outvars
                             if hasattr(v.aval, "shape"))
                for sub in jax.core.jaxprs_in_params(eqn.params):
                    walk(sub)
        walk(jaxpr.jaxpr)
        return max(sizes)

    assert largest(1) == 4 * 64 * 512
    assert largest(8) == 4 * 8 * 512


@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_bad_tile_count_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="loss_tiles must be a positive integer"):
        tiled_cross_entropy_terms(jnp.zeros((1, 4, 2)), jnp.zeros((2, 3)), jnp.zeros((1, 4)),
                                  _project, tiles=bad)


def _model_grads(model, params, batch, tiles, **kw):
    def f(p):
        return model.loss_fn(p, batch, None, loss_tiles=tiles, **kw)

    (loss, aux), grads = jax.jit(jax.value_and_grad(f, has_aux=True))(params)
    return loss, aux, grads


@pytest.mark.parametrize("dtype,tied", [("float32", False), ("bfloat16", True)])
def test_model_loss_and_gradients_equal_untiled(dtype, tied):
    """Encoder-decoder, untied logits_dense or tied embedding, f32 or bf16 activations, padded
    rows, label smoothing and z-loss: loss, aux sums and every parameter gradient agree."""
    config = tiny_config(dtype=dtype, logits_via_embedding=tied)
    model = EncoderDecoderModel(config)
    batch = make_batch(np.random.default_rng(1), b=4, tlen=8)
    params = jax.jit(model.init_params)(jax.random.PRNGKey(0), batch)
    kw = {"label_smoothing": 0.1, "z_loss": 1e-3}
    ref_loss, ref_aux, ref_g = _model_grads(model, params, batch, 1, **kw)
    loss, aux, grads = _model_grads(model, params, batch, 4, **kw)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for name in ref_aux:
        np.testing.assert_allclose(aux[name], ref_aux[name], rtol=1e-5, atol=1e-6)
    flat_ref = jax.tree_util.tree_leaves_with_path(ref_g)
    flat = dict(jax.tree_util.tree_leaves_with_path(grads))
    assert len(flat) == len(flat_ref)
    for path, g in flat_ref:
        np.testing.assert_allclose(flat[path], g, rtol=1e-4, atol=1e-6 if dtype == "float32"
                                   else 1e-5, err_msg=jax.tree_util.keystr(path))


def test_decoder_only_model_loss_and_gradients_equal_untiled():
    config = tiny_config(vocab_size=23, architecture="decoder_only", num_encoder_layers=0)
    model = DecoderOnlyModel(config)
    rng = np.random.default_rng(2)
    tokens = rng.integers(2, 23, (2, 10)).astype(np.int32)
    batch = {"decoder_input_tokens": np.concatenate([np.zeros((2, 1), np.int32),
                                                     tokens[:, :-1]], 1),
             "decoder_target_tokens": tokens,
             "decoder_loss_weights": (np.arange(10) >= 4).astype(np.float32)[None].repeat(2, 0)}
    params = jax.jit(model.init_params)(jax.random.PRNGKey(0), batch)
    ref_loss, _, ref_g = _model_grads(model, params, batch, 1, z_loss=1e-4)
    loss, _, grads = _model_grads(model, params, batch, 3, z_loss=1e-4)  # 10 = 3·4 − 2 padded
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(ref_g), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # 25 s of compiles; the model-level equalities above run by default
def test_train_step_with_tiled_loss_equals_untiled_after_two_steps():
    """The trainer's own step (Adafactor, jit, 2 accumulation steps): loss and parameters after
    two steps agree with loss_tiles=1 (the tile count 3 does not divide the 8 target tokens)."""
    from mnmt.models import partitioning
    from mnmt.training.optimizer import make_optimizer, rsqrt_schedule
    from mnmt.training.step_functions import build_step_functions

    model = EncoderDecoderModel(tiny_config(num_decoder_layers=1))
    rng = np.random.default_rng(3)
    batches = [make_batch(rng, b=4, tlen=8) for _ in range(2)]
    mesh = partitioning.make_mesh(1, 1)
    rules = partitioning.standard_logical_axis_rules()
    schedule = rsqrt_schedule(0.05, 1, warmup="constant", decay="constant")

    def shardings(_abstract):
        axes = model.params_logical_axes({k: v[:1] for k, v in batches[0].items()})
        return partitioning.logical_to_shardings(axes, mesh, rules)

    results = {}
    for tiles in (1, 3):
        fns = build_step_functions(model, make_optimizer(schedule), schedule, mesh, shardings,
                                   batches[0], label_smoothing=0.1, z_loss=1e-4,
                                   accumulation_steps=2, loss_tiles=tiles)
        state = fns.init(jax.random.PRNGKey(0))
        losses = []
        for batch in batches:
            state, metrics = fns.step(state, batch)
            losses.append(float(metrics["loss"]))
        results[tiles] = losses, jax.device_get(state["params"])
    np.testing.assert_allclose(results[3][0], results[1][0], rtol=1e-5)
    assert results[1][0][1] != results[1][0][0]  # the parameters moved between the steps
    for a, b in zip(jax.tree.leaves(results[1][1]), jax.tree.leaves(results[3][1]), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="loss_tiles must be a positive integer"):
        build_step_functions(model, make_optimizer(schedule), schedule, mesh, shardings,
                             batches[0], label_smoothing=0.0, z_loss=0.0, loss_tiles=0)
