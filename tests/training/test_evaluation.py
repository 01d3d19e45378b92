"""Evaluation plumbing: token-weighted loss over batches, decoding → sacrebleu BLEU / ChrF."""

from __future__ import annotations

import numpy as np
import pytest

from mnmt.training import evaluation


def test_loss_is_token_weighted_over_the_whole_split():
    # two batches with very different token counts: the mean is Σnll/Σtok, not a mean of means
    batches = [{"nll": np.array([2.0, 4.0]), "tok": np.array([1.0, 1.0])},
               {"nll": np.array([30.0, 0.0]), "tok": np.array([10.0, 0.0])}]
    score = lambda params, b: (b["nll"], b["tok"])  # noqa: E731
    loss, ntok = evaluation.evaluate_loss(score, None, batches, put=lambda b: b)
    assert ntok == 12 and loss == pytest.approx(36.0 / 12.0)
    with pytest.raises(ValueError, match="no target tokens"):
        evaluation.evaluate_loss(score, None, [batches[1] | {"tok": np.zeros(2)}], lambda b: b)


def test_bleu_tokenizer_by_target_language():
    assert evaluation.bleu_tokenizer("en-zh") == "zh"
    assert evaluation.bleu_tokenizer("en-de") == "13a"
    assert evaluation.bleu_tokenizer("de-ja") == "char"


def test_corpus_scores_perfect_and_wrong():
    refs = ["der hund sieht die katze", "ein haus ist groß"]
    assert evaluation.corpus_scores(refs, refs, "en-de") == pytest.approx((100.0, 100.0))
    bleu, chrf = evaluation.corpus_scores(["x y z", "q"], refs, "en-de")
    assert bleu < 5 and chrf < 20
    with pytest.raises(ValueError, match="2 references"):
        evaluation.corpus_scores(["a"], refs, "en-de")


def test_decode_and_score_against_raw_references(tiny_data):
    """A 'model' that outputs the reference tokens scores BLEU = ChrF = 100; padding rows of the
    final batch are skipped and `num_examples` is respected."""
    from mnmt.data.pipeline import eval_batches
    from mnmt.data.vocab import get_vocabulary

    vocab = get_vocabulary(tiny_data["vocab"])
    task = tiny_data["tasks"]["en-zh"]

    def batches():
        return eval_batches(task, "validation", {"inputs": 64, "targets": 64}, 10,
                            with_targets=True)

    oracle = lambda params, b: b["decoder_target_tokens"]  # noqa: E731
    put = lambda b: {k: v for k, v in b.items() if k != "targets_text"}  # noqa: E731
    scores = evaluation.decode_and_score(oracle, None, batches(), put, vocab, "en-zh",
                                         num_examples=24)
    assert scores.num_examples == 24  # eval_size 24 over batches of 10: last one padded
    assert scores.bleu == pytest.approx(100.0) and scores.chrf == pytest.approx(100.0)
    assert scores.examples[0][1] == scores.examples[0][2]
    shifted = lambda params, b: np.roll(b["decoder_target_tokens"], 1, axis=0)  # noqa: E731
    worse = evaluation.decode_and_score(shifted, None, batches(), put, vocab, "en-zh",
                                        num_examples=5)
    assert worse.num_examples == 5 and worse.chrf < 60
