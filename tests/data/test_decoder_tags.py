"""Caillaut et al. 2024's decoder-only tags and <eos> prefix (§3.3, §3.3.1): the format's token
sequences and loss weights, the decoding prompt equal to the training prefix, unmasked packing,
the vocabulary's domain pieces, and the pipeline's training / eval rows and resumable state."""

from __future__ import annotations

import numpy as np
import pytest

from mnmt.data.decoder_format import DecoderOptions, check_domain_keys, domain_names
from mnmt.data.formats import DecoderOnlyFormat, example_format

SEP, EOS, TGT, SRC, DOM = 3, 1, 40, 41, 50
LENGTHS = {"inputs": 8, "targets": 6}
PAIR = ([TGT, 5, 6, 7], [8, 9])  # ([<2xx>, *source], target) as the task streams give it


def _fmt(**options) -> DecoderOnlyFormat:
    return DecoderOnlyFormat(LENGTHS, SEP, options=DecoderOptions(**options))


# ---- token sequences and loss weights (independent expectations) ------------------------------
@pytest.mark.parametrize("options, tags, tokens, weights", [
    ({}, (None, None), [5, 6, 7, SEP, TGT, 8, 9, EOS], [0, 0, 0, 0, 0, 1, 1, 1]),
    ({"source_language_tags": True}, (SRC, None),
     [5, 6, 7, SEP, TGT, SRC, 8, 9, EOS], [0, 0, 0, 0, 0, 0, 1, 1, 1]),
    ({"domains": (("en-de", "news"),)}, (None, DOM),
     [5, 6, 7, SEP, TGT, DOM, 8, 9, EOS], [0, 0, 0, 0, 0, 0, 1, 1, 1]),
    ({"prefix_eos": True}, (None, None),
     [EOS, 5, 6, 7, SEP, TGT, 8, 9, EOS], [0, 0, 0, 0, 0, 0, 1, 1, 1]),
    ({"source_language_tags": True, "domains": (("en-de", "news"),), "loss_on_tags": True},
     (SRC, DOM), [5, 6, 7, SEP, TGT, SRC, DOM, 8, 9, EOS], [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]),
])
def test_example_tokens_and_weights(options, tags, tokens, weights):
    got_tokens, got_weights = _fmt(**options).finish(*PAIR, tags)
    assert got_tokens == tokens and got_weights == weights


def test_source_trimmed_so_the_prompt_still_fits_the_inputs_length():
    fmt = _fmt(source_language_tags=True, domains=(("x", "news"),), prefix_eos=True)
    long = [TGT, *range(100, 120)]
    tokens, _ = fmt.finish(long, [8], (SRC, DOM))
    # inputs 8 = <eos> + 3 source pieces + </src> <2xx> <2src> <dom>
    assert tokens == [EOS, 100, 101, 102, SEP, TGT, SRC, DOM, 8, EOS]
    assert len(fmt.prompt(long, (SRC, DOM))) == LENGTHS["inputs"]
    assert _fmt().finish(long, [8])[0][:7] == [100, 101, 102, 103, 104, 105, SEP]
    with pytest.raises(ValueError, match=r"feature_lengths\['inputs'\] = 4.*prefix_eos"):
        DecoderOnlyFormat({"inputs": 4, "targets": 4}, SEP,
                          options=DecoderOptions(source_language_tags=True, prefix_eos=True))


@pytest.mark.parametrize("loss_on_tags", [False, True])
def test_decoding_prompt_is_the_training_prefix(loss_on_tags):
    from mnmt.training.evaluation import decoder_prompts

    options = DecoderOptions(source_language_tags=True, domains=(("en-de", "news"),),
                             prefix_eos=True, loss_on_tags=loss_on_tags)
    train_tokens, _ = DecoderOnlyFormat(LENGTHS, SEP, options=options).finish(*PAIR, (SRC, DOM))
    eval_fmt = DecoderOnlyFormat(LENGTHS, SEP, options=options.for_eval())
    prompt = eval_fmt.prompt(PAIR[0], (SRC, DOM))
    assert prompt == [EOS, 5, 6, 7, SEP, TGT, SRC, DOM] == train_tokens[:len(prompt)]
    row = eval_fmt.pad([eval_fmt.finish(*PAIR, (SRC, DOM))])
    assert row["decoder_loss_weights"][0].tolist()[:9] == [0] * 8 + [1]  # tags never weighted
    got = decoder_prompts(row, LENGTHS["inputs"], eos_id=EOS)
    assert got[0].tolist() == prompt


def test_missing_tag_ids_are_refused():
    with pytest.raises(ValueError, match="source_language_tags"):
        _fmt(source_language_tags=True).finish(*PAIR)
    with pytest.raises(ValueError, match="InputConfig.domains"):
        _fmt(domains=(("en-de", "news"),)).finish(*PAIR, (None, None))


def test_unmasked_packing_reproduces_the_eos_issue():
    ex = [_fmt().finish([TGT, 5], [8]), _fmt().finish([TGT, 6], [9])]
    masked = _fmt().pack(ex)
    unmasked = _fmt(mask_segments=False).pack(ex)
    assert masked["decoder_segment_ids"][0, :10].tolist() == [1] * 5 + [2] * 5
    assert unmasked["decoder_segment_ids"][0, :10].tolist() == [1] * 10
    assert unmasked["decoder_positions"][0, :10].tolist() == list(range(10))
    # the second pair's first input is the first pair's <eos> (the cue Caillaut §3.3.1 describes)
    assert unmasked["decoder_input_tokens"][0, 5] == EOS and masked["decoder_input_tokens"][0, 5] == 0


def test_options_from_input_config_and_encoder_decoder_refusal():
    from mnmt.training.config import InputConfig

    base = {"mixture_or_task_name": "m", "feature_lengths": dict(LENGTHS), "batch_size": 8}
    assert DecoderOptions.of(InputConfig(**base)) == DecoderOptions()
    assert DecoderOptions().changed_fields() == []
    options = DecoderOptions.of(InputConfig(**base, domains={"en-zh": "legal", "en-de": "news"},
                                            prefix_eos=True))
    assert options.domains == (("en-de", "news"), ("en-zh", "legal"))
    assert options.changed_fields() == ["domains", "prefix_eos"]
    assert domain_names(options) == ["legal", "news"]
    assert options.domain_of("synth_en_de", "en-de") == "news"
    with pytest.raises(ValueError, match="no entry for task 'synth_fr_de'"):
        options.domain_of("synth_fr_de", "fr-de")
    with pytest.raises(ValueError, match=r"InputConfig.domains.*did you mean 'en-de'"):
        check_domain_keys(DecoderOptions(domains=(("en-dd", "news"),)), ["en-de", "synth_en_de"])
    with pytest.raises(ValueError, match="invalid domain name 'News'"):
        check_domain_keys(DecoderOptions(domains=(("en-de", "News"),)), ["en-de"])
    with pytest.raises(ValueError, match="InputConfig.prefix_eos applies to decoder-only"):
        example_format("encoder_decoder", LENGTHS, options=DecoderOptions(prefix_eos=True))


# ---- the vocabulary's domain pieces ----------------------------------------------------------
def test_vocabulary_domain_pieces(tmp_path):
    from mnmt.data import vocab

    texts = {"a": [f"the cat {i} sat on the mat" for i in range(50)]}
    plain = vocab.train_vocabulary(texts, str(tmp_path / "plain"), 40, languages=["en", "de"],
                                   separator=True)
    tagged = vocab.train_vocabulary(texts, str(tmp_path / "tagged"), 40, languages=["en", "de"],
                                    separator=True, domains=["news", "legal"])
    v0, v1 = vocab.get_vocabulary(plain), vocab.get_vocabulary(tagged)
    for piece in (vocab.lang_piece("en"), vocab.lang_piece("de"), vocab.SEPARATOR_PIECE):
        assert v0.tokenizer.piece_to_id(piece) == v1.tokenizer.piece_to_id(piece)
    news = vocab.domain_token_id(v1, "news", tagged)
    assert v1.tokenizer.id_to_piece(news) == "\u2581<dom_news>"
    assert news == v1.tokenizer.piece_to_id(vocab.SEPARATOR_PIECE) + 2  # sorted: legal, news
    with pytest.raises(ValueError, match=rf"{plain} has no piece for the domain tag '<dom_news>'"):
        vocab.domain_token_id(v0, "news", plain)


# ---- the pipeline: training rows, state, eval rows ---------------------------------------------
@pytest.fixture(scope="module")
def tag_data(tmp_path_factory):
    """cpu-tiny tasks with a vocabulary that has the separator and two domain tags."""
    from mnmt.data import mixtures, synthetic, tasks, vocab

    out = tmp_path_factory.mktemp("tag_vocab")
    path = vocab.train_vocabulary(synthetic.get_family("cpu-tiny"), str(out), 512,
                                  n_per_pair=500, separator=True, domains=["news", "legal"])
    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", path, eval_size=8, prefix="dtag")
    mixture = mixtures.register_weighted_mixture("dtag_p50",
                                                 {t: 0.5 for t in pair_tasks.values()})
    v = vocab.get_vocabulary(path)
    sp = v.tokenizer
    return {"vocab": path, "tasks": pair_tasks, "mixture": mixture, "sp": sp,
            "sep": vocab.separator_id(v), "en": sp.piece_to_id(vocab.lang_piece("en")),
            "lang": {p: sp.piece_to_id(vocab.lang_piece(p.split("-")[1])) for p in pair_tasks},
            "dom": {"en-de": vocab.domain_token_id(v, "news"),
                    "en-zh": vocab.domain_token_id(v, "legal")}}


TAGS = DecoderOptions(source_language_tags=True, domains=(("en-de", "news"), ("en-zh", "legal")),
                      prefix_eos=True, loss_on_tags=True)
ROW_LENGTHS = {"inputs": 12, "targets": 12}


def _segments(batch, row):
    seg = batch["decoder_segment_ids"][row]
    return [(batch["decoder_target_tokens"][row][seg == s], batch["decoder_loss_weights"][row][seg == s])
            for s in sorted(set(seg[seg > 0].tolist()))]


def test_training_rows_carry_the_tags(tag_data):
    from mnmt.data.pipeline import TrainInputs

    it = TrainInputs(tag_data["mixture"], ROW_LENGTHS, 4, seed=0, architecture="decoder_only",
                     decoder_options=TAGS)
    batch = next(it)
    pair_of = {lid: p for p, lid in tag_data["lang"].items()}
    seen = set()
    for row in range(4):
        for tokens, weights in _segments(batch, row):
            tokens = tokens.tolist()
            sep = tokens.index(tag_data["sep"])
            pair = pair_of[tokens[sep + 1]]
            seen.add(pair)
            assert tokens[0] == EOS and sep <= ROW_LENGTHS["inputs"] - 3
            assert tokens[sep + 2:sep + 4] == [tag_data["en"], tag_data["dom"][pair]]
            assert weights[:sep + 2].sum() == 0 and weights[sep + 2:].tolist() == \
                [1.0] * (len(tokens) - sep - 2)  # tags and target weighted (loss_on_tags)
    assert seen == {"en-de", "en-zh"}
    state = it.get_state()
    assert state["decoder_format"]["prefix_eos"] is True
    expected = next(it)
    again = TrainInputs(tag_data["mixture"], ROW_LENGTHS, 4, seed=0, architecture="decoder_only",
                        decoder_options=TAGS)
    again.set_state(state)
    assert all(np.array_equal(expected[k], v) for k, v in next(again).items())
    plain = TrainInputs(tag_data["mixture"], ROW_LENGTHS, 4, seed=0, architecture="decoder_only")
    assert "decoder_format" not in plain.get_state()
    with pytest.raises(ValueError, match="'decoder_format'"):
        plain.set_state(state)


def test_eval_rows_prompt_with_the_training_prefix(tag_data):
    from mnmt.data.decoder_format import task_tags
    from mnmt.data.pipeline import eval_batches, eval_examples
    from mnmt.training.evaluation import decoder_prompts, source_tokens

    task = tag_data["tasks"]["en-zh"]
    batch = next(eval_batches(task, "validation", ROW_LENGTHS, 4, architecture="decoder_only",
                              decoder_options=TAGS))
    fmt = DecoderOnlyFormat(ROW_LENGTHS, tag_data["sep"], options=TAGS)
    tags = task_tags([task], TAGS)[task]
    assert tags == (tag_data["en"], tag_data["dom"]["en-zh"])
    prompts = decoder_prompts(batch, ROW_LENGTHS["inputs"], eos_id=EOS)
    for i, (src, _) in enumerate(eval_examples(task, "validation")[:4]):
        inputs = [tag_data["lang"]["en-zh"], *tag_data["sp"].EncodeAsIds(src)]
        expected = fmt.prompt(inputs, tags)
        assert prompts[i][:len(expected)].tolist() == expected
        assert source_tokens(batch, i, eos_id=EOS).tolist() == expected[1:]
    with pytest.raises(ValueError, match="'<dom_finance>'"):
        task_tags([task], DecoderOptions(domains=((task, "finance"),)))
