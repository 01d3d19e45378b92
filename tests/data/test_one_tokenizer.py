"""One tokenizer for every path: the same text gives the same ids in the token cache's build,
the in-memory and synthetic training streams, the evaluation batches and ``mnmt-translate``,
and they are the ids ``sentencepiece.SentencePieceProcessor.encode`` gives.

The texts are built to hold segmentation ties: a unigram vocabulary with the pieces ``▁w``,
``4`` and ``44`` but no ``444`` segments ``w444`` as ``▁w|4|44`` or ``▁w|44|4`` (the same
pieces), and SentencePiece breaks that tie by the float rounding of the path's running score,
which depends on the text before the word.

The old rule (commit e79f659) tokenized the token cache's build and the synthetic streams word
by word (``mnmt.data.stream_workers.make_encoder``: a per-word cache) and the evaluation tasks
with seqio's ``tokenize`` over ``"<2xx> " + source`` (tensorflow_text's SentencePiece op), so
the cache and the evaluation batches held other ids than the in-memory path and
``mnmt-translate``; these tests fail there.
"""

import os
import random
import types

import pytest

WORDS = ("w444", "w4444", "w44444", "w4444444", "the", "cat")
N_PAIRS = 240


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14)))


@pytest.fixture(scope="module")
def ties(tmp_path_factory):
    """A 30-piece vocabulary with ties (``4`` and ``44``, no ``444``), a TSV of tie sentences
    and its bitext task (train and validation: the same file)."""
    import sentencepiece as spm

    from mnmt.data.sources.bitext import register_bitext_task
    from mnmt.data.vocab import train_vocabulary

    rng = random.Random(0)
    vocab_texts = [" ".join(rng.choice(("w4", "w44", "w", "4", "44", "the", "cat", "on"))
                            for _ in range(rng.randint(3, 12))) for _ in range(3000)]
    folder = tmp_path_factory.mktemp("ties")
    path = train_vocabulary(vocab_texts, str(folder), 30, languages=["de"])
    sp = spm.SentencePieceProcessor(model_file=path)
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    assert {"▁w", "4", "44"} <= pieces and "444" not in pieces
    pairs = [(_sentence(rng), _sentence(rng)) for _ in range(N_PAIRS)]
    tsv = os.path.join(folder, "bitext.tsv")
    with open(tsv, "w", encoding="utf-8") as f:
        f.writelines(f"{s}\t{t}\n" for s, t in pairs)
    task = register_bitext_task("one_tokenizer_en_de", "en-de", path,
                                {"train": tsv, "validation": tsv})
    lid = sp.piece_to_id("▁<2de>")
    expected = [([lid, *sp.encode(s)], sp.encode(t)) for s, t in pairs]
    return {"path": path, "sp": sp, "pairs": pairs, "task": task, "lid": lid,
            "expected": expected, "folder": folder}


def _per_word(sp, text: str) -> list[int]:
    """The old cache rule: spaced text encoded word by word."""
    return [i for w in text.split(" ") for i in sp.encode(w)]


def test_the_texts_hold_ties_that_context_breaks(ties):
    """Without ties every rule agrees and the other tests prove nothing."""
    sp = ties["sp"]
    texts = [t for pair in ties["pairs"] for t in pair]
    by_word = sum(_per_word(sp, t) != sp.encode(t) for t in texts)
    prefixed = sum(sp.encode("<2de> " + t)[1:] != sp.encode(t) for t in texts)
    assert by_word >= 10 and prefixed >= 50
    assert all(sp.decode(_per_word(sp, t)) == t for t in texts)  # the same text, other ids


def test_text_encoder_is_sentencepieces_encode_whatever_the_processors_options(ties):
    import sentencepiece as spm

    from mnmt.data.vocab import get_vocabulary, text_encoder

    sp = ties["sp"]
    sampling = spm.SentencePieceProcessor(model_file=ties["path"], add_bos=True, add_eos=True,
                                          enable_sampling=True, alpha=0.5, nbest_size=-1)
    texts = [t for pair in ties["pairs"] for t in pair]
    for vocab in (sp, sampling, get_vocabulary(ties["path"])):
        encode = text_encoder(vocab)
        assert [encode(t) for t in texts] == [sp.encode(t) for t in texts]


def test_in_memory_and_stream_paths_give_sentencepieces_ids(ties):
    from mnmt.data.pipeline import TaskStream, in_memory_train_set
    from mnmt.data.tasks import get_task_info

    assert in_memory_train_set(get_task_info(ties["task"]), (0, 1)) == ties["expected"]
    stream = TaskStream(ties["task"], 0, (0, 1), 0)
    assert stream.encode(ties["pairs"]) == ties["expected"]


def test_the_token_cache_holds_sentencepieces_ids(ties, tmp_path):
    from mnmt.data.cache import build_cache, open_task_cache

    cache_dir = str(tmp_path)
    build_cache(ties["task"], cache_dir, num_parts=1, num_shards=2)
    split = open_task_cache(ties["task"], [cache_dir], (0, 1), seed=0)
    keys = split.positions(0, split.size)  # data-source key k: example 2·k' + s of shard s
    examples = split.examples(0, split.size)
    by_index = {}
    for key, (src, tgt) in zip(keys, examples, strict=True):
        shard, record = (0, key) if key < split.index.shard_examples[0] else (
            1, key - split.index.shard_examples[0])
        by_index[2 * record + shard] = (list(src), list(tgt))
    assert [by_index[i] for i in range(N_PAIRS)] == ties["expected"]


def test_a_cache_of_the_old_tokenization_is_rebuilt_not_read(ties, tmp_path):
    import dataclasses

    from mnmt.data.cache import build_cache
    from mnmt.data.cache.build import cache_status, expected_identity, read_complete_index
    from mnmt.data.tasks import get_task_info

    cache_dir = str(tmp_path)
    build_cache(ties["task"], cache_dir, num_parts=1, num_shards=2)
    index = read_complete_index(os.path.join(cache_dir, ties["task"]))
    identity = expected_identity(get_task_info(ties["task"]))
    assert cache_status(index, identity) == ""
    old = dataclasses.replace(index, version=1)
    assert "version 1" in cache_status(old, identity)
    assert "word by word" in cache_status(old, identity)


def test_evaluation_batches_hold_sentencepieces_ids(ties):
    import numpy as np

    from mnmt.data.eval_inputs import eval_batches

    lengths = {"inputs": 64, "targets": 64}
    rows = {"encoder_input_tokens": [], "decoder_target_tokens": []}
    for batch in eval_batches(ties["task"], "validation", lengths, 32):
        for k, v in rows.items():
            v.extend(batch[k])
    assert len(rows["encoder_input_tokens"]) == 256  # 240 examples, the last batch padded
    for i, (src, tgt) in enumerate(ties["expected"]):
        assert len(src) < 64 and len(tgt) < 64
        np.testing.assert_array_equal(rows["encoder_input_tokens"][i][:len(src) + 1], [*src, 1])
        np.testing.assert_array_equal(rows["decoder_target_tokens"][i][:len(tgt) + 1], [*tgt, 1])
        assert not rows["encoder_input_tokens"][i][len(src) + 1:].any()


def test_translate_encodes_sentencepieces_ids(ties):
    from mnmt.data.vocab import get_vocabulary
    from mnmt.training.translate import TrainedRun, Translator

    config = types.SimpleNamespace(is_decoder_only=False, architecture="encoder_decoder")
    run = TrainedRun(run_dir="", run={"mixture": {"tasks": {}}}, step=0, steps=[0], params=None,
                     model=None, model_config=config, vocabulary=get_vocabulary(ties["path"]),
                     vocabulary_path=ties["path"], feature_lengths={"inputs": 64, "targets": 64},
                     pairs=["en-de"])
    translator = Translator(run, "en-de", beam_size=1, alpha=0.6)
    examples = translator.encode([s for s, _ in ties["pairs"]])
    assert [list(inputs)[:-1] for inputs, _ in examples] == [s for s, _ in ties["expected"]]
    assert translator.truncated == 0
