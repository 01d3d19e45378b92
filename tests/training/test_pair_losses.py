"""The training loss per pair: task ids in the packed rows, the step's per-pair sums, the window.

The step sums each pair's −log p over the target tokens whose `decoder_task_ids` name it, from
the per-token losses of its own forward pass; the window turns a log interval's sums into the
`train_loss` rows (token-weighted means). Before e79f659 the only row was `all`, the mean of the
steps' training objectives (label smoothing and z-loss included).
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from mnmt.data.packing import pack_examples, pad_examples
from mnmt.models import decoder_only
from mnmt.training.loss_window import LossWindow

LENGTHS = {"inputs": 8, "targets": 8}


def _examples(rng, n):
    def tokens():
        return list(rng.integers(2, 30, rng.integers(1, 6)))

    return [(tokens(), tokens()) for _ in range(n)]


def _labels_follow_segments(rows, labels):
    """Each packed example's target positions carry its label; padding carries 0."""
    seg, ids = rows["decoder_segment_ids"], rows["decoder_task_ids"]
    assert ids.shape == seg.shape and ids.dtype == np.int32
    np.testing.assert_array_equal(ids[seg == 0], 0)
    got = [int(ids[r][seg[r] == s][0]) for r in range(len(seg)) for s in range(1, seg[r].max() + 1)]
    return got, labels


def test_encoder_decoder_packing_labels_every_target_position_with_its_example():
    rng = np.random.default_rng(0)
    examples = _examples(rng, 12)
    labels = list(rng.integers(1, 4, len(examples)))
    rows = pack_examples(examples, LENGTHS, labels)
    plain = pack_examples(examples, LENGTHS)
    assert set(rows) - set(plain) == {"decoder_task_ids"}
    for key, value in plain.items():
        np.testing.assert_array_equal(rows[key], value)  # the labels change no other feature
    got, want = _labels_follow_segments(rows, labels)
    assert got == want  # greedy in order: segments in row-major order are the examples
    padded = pad_examples(examples, LENGTHS, labels)
    np.testing.assert_array_equal(padded["decoder_task_ids"],
                                  np.where(padded["decoder_target_tokens"] > 0,
                                           np.asarray(labels)[:, None], 0))


def test_decoder_only_first_fit_packing_labels_every_position_with_its_example():
    rng = np.random.default_rng(1)
    examples = [(list(rng.integers(2, 30, n)), [1.0] * n) for n in rng.integers(2, 9, 10)]
    labels = [i + 1 for i in range(len(examples))]  # distinct: the example of each segment
    rows = decoder_only.pack_examples(examples, 12, labels=labels)
    assert "decoder_task_ids" not in decoder_only.pack_examples(examples, 12)
    seg, ids, tok = (rows[k] for k in ("decoder_segment_ids", "decoder_task_ids",
                                       "decoder_target_tokens"))
    for r in range(len(seg)):
        for s in range(1, seg[r].max() + 1):
            label = set(ids[r][seg[r] == s].tolist())
            assert len(label) == 1  # first fit: not row-major, yet each segment one example
            np.testing.assert_array_equal(tok[r][seg[r] == s], examples[label.pop() - 1][0])
    np.testing.assert_array_equal(ids[seg == 0], 0)


# ---- the step ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_and_batch():
    from mnmt.models.encoder_decoder import EncoderDecoderModel
    from mnmt.models.test_utils import make_batch, tiny_config

    model = EncoderDecoderModel(tiny_config())
    batch = make_batch(np.random.default_rng(2), b=4, tlen=7)  # row i ends in i padding tokens
    ids = np.array([[1] * 7, [2] * 7, [1] * 3 + [2] * 4, [2] * 2 + [1] * 5], np.int32)
    batch["decoder_task_ids"] = np.where(batch["decoder_target_tokens"] > 0, ids, 0)
    return model, batch


def _step_metrics(model, batch, **options):
    from mnmt.training.step_functions import single_device_step_functions

    fns = single_device_step_functions(model, batch, num_pairs=2, **options)
    state = fns.init(jax.random.PRNGKey(0))
    params = jax.device_get(state["params"])  # the step donates its state
    _, metrics = fns.step(state, batch)
    return params, jax.device_get(metrics)


def _reference_nll(model, params, batch):
    """−log p of each target token from a forward pass of its own (no smoothing, no z-loss)."""
    from mnmt.models.losses import cross_entropy_terms

    logits = model.apply(params, {k: v for k, v in batch.items() if k != "decoder_task_ids"})
    nll = np.asarray(cross_entropy_terms(logits, batch["decoder_target_tokens"])[1])
    return nll * (batch["decoder_target_tokens"] > 0)


@pytest.mark.parametrize("options", [{}, {"accumulation_steps": 2},
                                     {"label_smoothing": 0.1, "z_loss": 1e-2}])
def test_step_sums_each_pairs_own_token_losses(model_and_batch, options):
    """Rows that mix pairs (as packed rows do) and padding: pair k's sum is the −log p of the
    tokens with id k + 1 only, its count their number; the pairs add up to the batch, whose
    mean is the token-weighted mean of the pairs'. Accumulation and smoothing change none."""
    model, batch = model_and_batch
    params, metrics = _step_metrics(model, batch, **options)
    nll = _reference_nll(model, params, batch)
    ids = batch["decoder_task_ids"]
    want_sum = [nll[ids == k].sum() for k in (1, 2)]
    want_n = [int((ids == k).sum()) for k in (1, 2)]
    np.testing.assert_allclose(metrics["pair_cross_entropy_sum"], want_sum, rtol=1e-5)
    np.testing.assert_array_equal(metrics["pair_num_tokens"], want_n)
    assert metrics["num_tokens"] == sum(want_n) == int((batch["decoder_target_tokens"] > 0).sum())
    assert metrics["cross_entropy_sum"] == pytest.approx(nll.sum(), rel=1e-5)
    means = [s / n for s, n in zip(want_sum, want_n, strict=True)]
    assert metrics["cross_entropy"] == pytest.approx(
        np.dot(means, want_n) / sum(want_n), rel=1e-5)
    assert abs(means[0] - means[1]) > 1e-3  # the two pairs' means really differ here
    if options.get("label_smoothing"):
        assert abs(metrics["loss"] - metrics["cross_entropy"]) > 1e-2  # the objective is not it


def test_a_step_for_pairs_refuses_a_batch_without_task_ids(model_and_batch):
    model, batch = model_and_batch
    plain = {k: v for k, v in batch.items() if k != "decoder_task_ids"}
    with pytest.raises(KeyError, match="no decoder_task_ids feature"):
        _step_metrics(model, plain)


# ---- the window --------------------------------------------------------------------------
def _metrics(ce, n, pair_ce, pair_n):
    return {"cross_entropy_sum": ce, "num_tokens": n, "pair_cross_entropy_sum": np.array(pair_ce),
            "pair_num_tokens": np.array(pair_n)}


def test_window_means_are_token_weighted_and_all_is_the_weighted_mean_of_the_pairs():
    w = LossWindow()
    w.add(_metrics(30.0, 20, [10.0, 20.0, 0.0], [5, 15, 0]), ["en-de", "en-zh"])
    w.add(_metrics(12.0, 4, [12.0, 0.0, 0.0], [4, 0, 0]), ["en-de", "en-zh"])
    means = w.means()
    assert list(means) == ["all", "en-de", "en-zh"]
    assert means["en-de"] == pytest.approx(22.0 / 9) and means["en-zh"] == pytest.approx(20.0 / 15)
    assert means["all"] == pytest.approx(42.0 / 24)  # not the mean of the steps' means (1.75+3)/2
    assert means["all"] == pytest.approx((9 * means["en-de"] + 15 * means["en-zh"]) / 24)


def test_a_pair_without_tokens_in_the_window_gets_no_value():
    w = LossWindow()
    w.add(_metrics(6.0, 3, [6.0, 0.0], [3, 0]), ["en-de", "en-zh"])  # en-zh: weight 0
    assert w.means() == {"all": 2.0, "en-de": 2.0}
    assert math.isnan(LossWindow().means()["all"])


def test_window_state_round_trips_and_an_old_checkpoints_window_starts_empty():
    w = LossWindow()
    w.add(_metrics(6.5, 3, [2.5, 4.0], [1, 2]), ["b", "a"])
    back = LossWindow.from_state(w.state())
    assert back == w and back.means() == w.means()
    assert LossWindow.from_state([12.5, 4]) == LossWindow()  # [Σ step losses, steps]


def test_task_ids_past_the_runs_pairs_must_be_empty():
    """A grouped step sums as many pairs as its largest mixture; a member with fewer pairs
    sees zeros past its own, and anything else is an error, not a silently dropped loss."""
    w = LossWindow()
    w.add(_metrics(4.0, 2, [4.0, 0.0], [2, 0]), ["en-de"])
    assert w.means() == {"all": 2.0, "en-de": 2.0}
    with pytest.raises(ValueError, match="past this run's 1 pairs"):
        w.add(_metrics(4.0, 2, [2.0, 2.0], [1, 1]), ["en-de"])
