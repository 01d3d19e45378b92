"""EncoderDecoderModel: loss normalisation/aux, scoring, packing isolation, masks, dtypes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mnmt.models.encoder_decoder import EncoderDecoderModel
from mnmt.models.test_utils import make_batch, tiny_config


@pytest.fixture(scope="module")
def setup():
    config = tiny_config()
    model = EncoderDecoderModel(config)
    batch = make_batch(np.random.default_rng(0))
    params = jax.jit(model.init_params)(jax.random.PRNGKey(0), batch)
    return model, params, batch


_CACHE: dict = {}


def _apply(model):
    key = ("apply", model.config)
    if key not in _CACHE:
        _CACHE[key] = jax.jit(model.apply)
    return _CACHE[key]


def _loss(model, ls=0.0, z=0.0):
    key = ("loss", model.config, ls, z)
    if key not in _CACHE:
        _CACHE[key] = jax.jit(lambda p, b, r: model.loss_fn(p, b, r, label_smoothing=ls,
                                                             z_loss=z))
    return _CACHE[key]


def _reference_nll(logits, targets):
    logp = jax.nn.log_softmax(np.asarray(logits, np.float64), axis=-1)
    return -np.take_along_axis(np.asarray(logp), targets[..., None], -1)[..., 0]


def test_loss_is_mean_per_target_token(setup):
    model, params, batch = setup
    loss, aux = _loss(model)(params, batch, None)
    logits = _apply(model)(params, batch)
    nll = _reference_nll(logits, batch["decoder_target_tokens"])
    w = batch["decoder_loss_weights"]
    assert float(aux["num_tokens"]) == w.sum()
    np.testing.assert_allclose(float(aux["cross_entropy_sum"]), (nll * w).sum(), rtol=1e-5)
    np.testing.assert_allclose(float(loss), (nll * w).sum() / w.sum(), rtol=1e-5)
    assert float(aux["z_loss_sum"]) == 0.0


def test_label_smoothing_and_z_loss_leave_cross_entropy_sum_pure(setup):
    model, params, batch = setup
    loss0, aux0 = _loss(model)(params, batch, None)
    loss1, aux1 = _loss(model, 0.1, 1e-2)(params, batch, None)
    np.testing.assert_allclose(float(aux1["cross_entropy_sum"]), float(aux0["cross_entropy_sum"]),
                               rtol=1e-6)
    logits = np.asarray(_apply(model)(params, batch), np.float64)
    logz = np.log(np.exp(logits).sum(-1))
    w = batch["decoder_loss_weights"]
    np.testing.assert_allclose(float(aux1["z_loss_sum"]), 1e-2 * (logz ** 2 * w).sum(), rtol=1e-4)
    # smoothed CE (minus its entropy constant) differs from plain CE
    assert abs(float(loss1) - float(loss0)) > 1e-4
    # smoothing: a perfect, confident prediction of the smoothed target scores ~0
    from mnmt.models.losses import cross_entropy_terms
    v, eps = 5, 0.1
    q = np.full(v, eps / (v - 1))
    q[2] = 1 - eps
    total, nll, _ = cross_entropy_terms(jnp.log(jnp.asarray(q))[None, None], jnp.array([[2]]),
                                        label_smoothing=eps)
    assert abs(float(total[0, 0])) < 1e-5


def test_score_batch_matches_loss(setup):
    model, params, batch = setup
    nll, ntok = jax.jit(model.score_batch)(params, batch)
    _, aux = _loss(model)(params, batch, None)
    np.testing.assert_allclose(float(jnp.sum(nll)), float(aux["cross_entropy_sum"]), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(ntok), batch["decoder_loss_weights"].sum(1))


def test_padding_does_not_change_real_positions(setup):
    """Appending padding to inputs and targets leaves the real positions' logits unchanged."""
    model, params, batch = setup
    padded = {k: np.pad(v, ((0, 0), (0, 4))) for k, v in batch.items()}
    a = np.asarray(_apply(model)(params, batch))
    b = np.asarray(_apply(model)(params, padded))[:, : a.shape[1]]
    w = batch["decoder_loss_weights"] > 0
    np.testing.assert_allclose(a[w], b[w], atol=1e-5)


def _pack(ex1, ex2):
    """Pack two single-example batches into one row with segment ids (T5X packed format)."""
    out = {}
    for k in ex1:
        out[k] = np.concatenate([ex1[k], ex2[k]], axis=1)
    for side, key in (("encoder", "encoder_input_tokens"), ("decoder", "decoder_target_tokens")):
        l1, l2 = ex1[key].shape[1], ex2[key].shape[1]
        out[f"{side}_segment_ids"] = np.array([[1] * l1 + [2] * l2], np.int32)
        out[f"{side}_positions"] = np.array([list(range(l1)) + list(range(l2))], np.int32)
    return out


def test_packed_segments_do_not_attend_to_each_other(setup):
    model, params, _ = setup
    rng = np.random.default_rng(1)
    a = make_batch(rng, b=1, pad_tail=False)
    b = make_batch(rng, b=1, ilen=6, tlen=5, pad_tail=False)
    b2 = make_batch(rng, b=1, ilen=6, tlen=5, pad_tail=False)   # perturbed second segment
    la = np.asarray(_apply(model)(params, a))[0]
    p1 = np.asarray(_apply(model)(params, _pack(a, b)))[0]
    p2 = np.asarray(_apply(model)(params, _pack(a, b2)))[0]
    t = la.shape[0]
    np.testing.assert_allclose(p1[:t], la, atol=1e-5)      # segment 1 == alone
    np.testing.assert_allclose(p2[:t], la, atol=1e-5)      # unaffected by segment 2's content
    lb = np.asarray(_apply(model)(params, b))[0]
    np.testing.assert_allclose(p1[t:], lb, atol=1e-5)      # segment 2 == alone (relpos reset)
    assert np.abs(p2[t:] - p1[t:]).max() > 1e-3           # the perturbation itself is visible
    # without segment ids the first segment's logits *do* change: the test has teeth
    unmasked = {k: v for k, v in _pack(a, b2).items() if "segment" not in k}
    p3 = np.asarray(_apply(model)(params, unmasked))[0]
    assert np.abs(p3[:t] - la).max() > 1e-3


def test_decoder_is_causal(setup):
    model, params, batch = setup
    changed = {k: v.copy() for k, v in batch.items()}
    changed["decoder_input_tokens"][:, 4:] = 5
    a = np.asarray(_apply(model)(params, batch))[:, :4]
    b = np.asarray(_apply(model)(params, changed))[:, :4]
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_dropout_is_active_only_with_rng(setup):
    base, params, batch = setup
    model = EncoderDecoderModel(base.config.replace(dropout_rate=0.3))  # same parameter shapes
    det1, det2 = (_loss(model)(params, batch, None)[0] for _ in range(2))
    r1 = _loss(model)(params, batch, jax.random.PRNGKey(1))[0]
    r2 = _loss(model)(params, batch, jax.random.PRNGKey(2))[0]
    assert float(det1) == float(det2)
    assert float(det1) == pytest.approx(float(_loss(base)(params, batch, None)[0]), rel=1e-6)
    assert float(r1) != float(r2) and float(r1) != float(det1)


def test_bfloat16_activations_close_to_float32(setup):
    model, params, batch = setup
    m16 = EncoderDecoderModel(model.config.replace(dtype="bfloat16"))
    p16 = jax.eval_shape(lambda: m16.init_params(jax.random.PRNGKey(0), batch))
    assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(p16))
    # bfloat16 activations, float32 logits (T5X's logits_dense is float32)
    assert _apply(m16)(params, batch).dtype == jnp.float32
    l32 = float(_loss(model)(params, batch, None)[0])
    l16 = float(_loss(m16)(params, batch, None)[0])
    assert abs(l32 - l16) < 0.05 * l32


def test_gradients_flow_to_every_parameter(setup):
    model, params, batch = setup
    grads = jax.jit(jax.grad(lambda p: model.loss_fn(p, batch, None)[0]))(params)
    for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
        assert float(jnp.abs(g).max()) > 0, jax.tree_util.keystr(path)


def test_bad_batch_errors_name_the_feature(setup):
    model, params, batch = setup
    with pytest.raises(KeyError, match="decoder_input_tokens"):
        model.loss_fn(params, {k: v for k, v in batch.items() if k != "decoder_input_tokens"},
                      None)
    with pytest.raises(ValueError, match="encoder_input_tokens"):
        model.loss_fn(params, {**batch, "encoder_input_tokens": batch["encoder_input_tokens"][0]},
                      None)


@pytest.mark.slow
def test_learns_to_copy_and_decodes_it():
    """End to end: a tiny model trained with Adam on a copy task drives its loss down and beam
    search then reproduces unseen inputs (gradients, masks and decoding fit together)."""
    import optax

    config = tiny_config(vocab_size=12, emb_dim=32, num_heads=4, head_dim=8, mlp_dim=64,
                         num_encoder_layers=1, num_decoder_layers=1)
    model = EncoderDecoderModel(config)
    rng = np.random.default_rng(0)

    def batch_of(n):
        src = rng.integers(2, 12, (n, 6)).astype(np.int32)
        tgt = np.concatenate([src, np.ones((n, 1), np.int32)], axis=1)   # copy + EOS
        return {"encoder_input_tokens": src, "decoder_target_tokens": tgt,
                "decoder_input_tokens": np.concatenate([np.zeros((n, 1), np.int32),
                                                        tgt[:, :-1]], axis=1),
                "decoder_loss_weights": np.ones_like(tgt, np.float32)}

    params = jax.jit(model.init_params)(jax.random.PRNGKey(0), batch_of(2))
    tx = optax.adam(3e-3)
    opt = tx.init(params)

    @jax.jit
    def step(params, opt, batch):
        loss, grads = jax.value_and_grad(lambda p: model.loss_fn(p, batch, None)[0])(params)
        updates, opt = tx.update(grads, opt)
        return optax.apply_updates(params, updates), opt, loss

    first = None
    for _ in range(1000):
        params, opt, loss = step(params, opt, batch_of(64))
        first = float(loss) if first is None else first
    assert float(loss) < 0.1 * first
    test = batch_of(16)
    out = np.asarray(model.predict_batch(params, test, beam_size=4, alpha=1.0,
                                         max_decode_length=7))
    assert (out == test["decoder_target_tokens"]).mean() > 0.9
