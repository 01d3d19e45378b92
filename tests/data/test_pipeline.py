"""Training iterator (format, seqio equivalence, determinism, exact resume, mixture rates)."""

import numpy as np
import pytest

from mnmt.data.pipeline import TrainInputs, eval_batches, eval_examples, pack_examples

LENGTHS = {"inputs": 32, "targets": 32}


def _random_examples(rng, n, max_len=20):
    out = []
    for _ in range(n):
        a = rng.integers(3, 50, size=rng.integers(1, max_len)).tolist() + [1]
        b = rng.integers(3, 50, size=rng.integers(1, max_len)).tolist() + [1]
        out.append((a, b))
    return out


@pytest.mark.parametrize("pack", [True, False])
def test_packer_matches_seqio_feature_converter(pack):
    import seqio
    import tensorflow as tf

    from mnmt.data.pipeline import pad_examples

    rng = np.random.default_rng(0)
    lengths = {"inputs": 24, "targets": 16}
    examples = _random_examples(rng, 96, max_len=30)
    # seqio tasks hand the converter examples already trimmed to the feature lengths
    examples = [(a[:lengths["inputs"]], b[:lengths["targets"]]) for a, b in examples]
    ds = tf.data.Dataset.from_generator(
        lambda: ({"inputs": np.array(a, np.int32), "targets": np.array(b, np.int32)} for a, b in examples),
        output_signature={"inputs": tf.TensorSpec([None], tf.int32),
                          "targets": tf.TensorSpec([None], tf.int32)},
    )
    conv = seqio.EncDecFeatureConverter(pack=pack)(ds, lengths)
    ref = list(conv.as_numpy_iterator())
    window = max(lengths.values()) if pack else 1
    ours = []
    for i in range(0, len(examples), window):
        rows = (pack_examples if pack else pad_examples)(examples[i:i + window], lengths)
        ours += [{k: v[r] for k, v in rows.items()} for r in range(next(iter(rows.values())).shape[0])]
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=False):
        assert set(a) == set(b)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_fast_path_tokens_equal_seqio_task(tiny_tasks):
    import seqio

    from mnmt.data.pipeline import TaskStream
    from mnmt.data.tasks import get_task_info

    name = tiny_tasks["en-zh"]
    task = seqio.get_mixture_or_task(name)
    ds = task.get_dataset({"inputs": 64, "targets": 64}, split="validation", shuffle=False)
    ref = [(list(x["inputs"]), list(x["targets"])) for _, x in zip(range(50), ds.as_numpy_iterator(), strict=False)]
    stream = TaskStream(name, 0, (0, 1), 0)
    texts = eval_examples(name, "validation")[:50]
    assert [(a + [1], b + [1]) for a, b in stream.encode(texts)] == ref
    # the language token is one piece, right at the start, with no wasted "▁"
    from mnmt.data.vocab import get_vocabulary, language_token_id

    lid = language_token_id(get_vocabulary(get_task_info(name).vocab_path), "zh")
    assert all(r[0][0] == lid and r[0][1] != lid for r in ref)
    assert all(r[0][-1] == 1 and r[1][-1] == 1 for r in ref)


def test_trimming_matches_seqio_append_eos_after_trim(tiny_tasks):
    import seqio

    from mnmt.data.pipeline import TaskStream, finish_example

    name = tiny_tasks["en-de"]
    lengths = {"inputs": 6, "targets": 5}  # most examples are longer: trimmed
    ds = seqio.get_mixture_or_task(name).get_dataset(lengths, split="validation", shuffle=False)
    ref = [(list(x["inputs"]), list(x["targets"])) for x in ds.take(40).as_numpy_iterator()]
    ours = [finish_example(a, b, lengths)
            for a, b in TaskStream(name, 0, (0, 1), 0).encode(eval_examples(name, "validation")[:40])]
    assert ours == ref
    assert sum(len(a) == 6 for a, _ in ref) > 20


def _mixture(tiny_tasks, w_de):
    from mnmt.data.mixtures import register_weighted_mixture

    return register_weighted_mixture(
        f"test_mix_{w_de}", {tiny_tasks["en-de"]: w_de, tiny_tasks["en-zh"]: 1 - w_de}
    )


def test_batches_have_converter_format_and_are_deterministic(tiny_tasks):
    mix = _mixture(tiny_tasks, 0.5)
    a = TrainInputs(mix, LENGTHS, 16, seed=3)
    b = TrainInputs(mix, LENGTHS, 16, seed=3)
    c = TrainInputs(mix, LENGTHS, 16, seed=4)
    ba, bb, bc = next(a), next(b), next(c)
    assert set(ba) == {"encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens",
                       "decoder_loss_weights", "encoder_segment_ids", "decoder_segment_ids",
                       "encoder_positions", "decoder_positions"}
    for k, v in ba.items():
        assert v.shape == (16, 32) and v.dtype == np.int32
        np.testing.assert_array_equal(v, bb[k])
    assert not np.array_equal(ba["decoder_target_tokens"], bc["decoder_target_tokens"])
    # packing really packs: several examples per row on average
    assert ba["decoder_segment_ids"].max(axis=1).mean() > 1.5


def test_resume_neither_repeats_nor_skips(tiny_tasks):
    mix = _mixture(tiny_tasks, 0.3)
    ref_it = TrainInputs(mix, LENGTHS, 8, seed=0)
    ref = [next(ref_it) for _ in range(30)]
    it = TrainInputs(mix, LENGTHS, 8, seed=0)
    for _ in range(11):
        next(it)
    state = it.get_state()
    import json

    state = json.loads(json.dumps(state))  # must survive a JSON round trip (checkpoint)
    resumed = TrainInputs(mix, LENGTHS, 8, seed=0)
    resumed.set_state(state)
    for i in range(11, 30):
        got = next(resumed)
        for k in got:
            np.testing.assert_array_equal(got[k], ref[i][k], err_msg=f"batch {i} {k}")
    bad = dict(state, seed=1)
    with pytest.raises(ValueError, match="seed"):
        resumed.set_state(bad)


def test_unpacked_resume_and_capped_task_epochs(tiny_vocab):
    from mnmt.data.tasks import register_synthetic_tasks

    capped = register_synthetic_tasks("cpu-tiny", tiny_vocab, caps={"en-de": 40}, eval_size=50)
    name = capped["en-de"]
    it = TrainInputs(name, LENGTHS, 8, seed=0, pack=False)
    rows = [next(it)["decoder_target_tokens"] for _ in range(10)]  # 80 rows = 2 epochs of 40
    seqs = [tuple(r[r != 0]) for b in rows for r in b]
    # each epoch is a permutation of the same 40 examples
    assert sorted(seqs[:40]) == sorted(seqs[40:80])
    assert seqs[:40] != seqs[40:80]
    it2 = TrainInputs(name, LENGTHS, 8, seed=0, pack=False)
    for _ in range(3):
        next(it2)
    st = it2.get_state()
    it3 = TrainInputs(name, LENGTHS, 8, seed=0, pack=False)
    it3.set_state(st)
    np.testing.assert_array_equal(next(it3)["decoder_target_tokens"], rows[3])


def test_sampled_pair_frequencies_match_weights(tiny_tasks):
    """Each example's task is read off its language token; counts ~ Binomial(n, p)."""
    from mnmt.data.tasks import get_task_info
    from mnmt.data.vocab import get_vocabulary, language_token_id

    vocab = get_vocabulary(get_task_info(tiny_tasks["en-de"]).vocab_path)
    de = language_token_id(vocab, "de")
    zh = language_token_id(vocab, "zh")
    for w in (0.1, 0.7):
        it = TrainInputs(_mixture(tiny_tasks, w), LENGTHS, 64, seed=11)
        n_de = n_zh = 0
        for _ in range(20):
            b = next(it)
            starts = b["encoder_positions"] == 0
            toks = b["encoder_input_tokens"][starts & (b["encoder_segment_ids"] > 0)]
            n_de += int((toks == de).sum())
            n_zh += int((toks == zh).sum())
        n = n_de + n_zh
        assert n > 2000
        assert abs(n_de / n - w) < 4 * np.sqrt(w * (1 - w) / n)


def test_zero_weight_task_is_never_sampled(tiny_tasks):
    from mnmt.data.mixtures import mixture_weights

    mix = _mixture(tiny_tasks, 0.0)
    assert mixture_weights(mix)[tiny_tasks["en-de"]] == 0.0
    it = TrainInputs(mix, LENGTHS, 16, seed=0)
    assert it.tasks == [tiny_tasks["en-zh"]]


def test_eval_batches_cover_split_once_with_padding(tiny_tasks):
    name = tiny_tasks["en-de"]
    batches = list(eval_batches(name, "validation", LENGTHS, 64, with_targets=True))
    assert len(batches) == 5  # 300 examples
    real = sum(int((b["decoder_loss_weights"].sum(1) > 0).sum()) for b in batches)
    assert real == 300
    last = batches[-1]
    assert (last["decoder_loss_weights"][300 - 256:] == 0).all()
    assert last["targets_text"][300 - 256 - 1] != "" and last["targets_text"][-1] == ""
    texts = [t for b in batches for t in b["targets_text"] if t]
    assert texts == [t for _, t in eval_examples(name, "validation")]
    assert "encoder_segment_ids" not in last


def test_prefetching_iterator_gives_same_batches_and_consumed_state(tiny_tasks):
    mix = _mixture(tiny_tasks, 0.5)
    plain = TrainInputs(mix, LENGTHS, 8, seed=5)
    pre = TrainInputs(mix, LENGTHS, 8, seed=5, prefetch=3)
    for _ in range(6):
        a, b = next(plain), next(pre)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    # the background thread is ahead, but the state is that of the consumed batches
    assert pre.get_state() == plain.get_state()
    st = pre.get_state()
    pre.close()
    again = TrainInputs(mix, LENGTHS, 8, seed=5, prefetch=2)
    again.set_state(st)
    np.testing.assert_array_equal(next(again)["decoder_target_tokens"], next(plain)["decoder_target_tokens"])
    again.close()


def test_stream_processes_give_the_same_batches_and_resume(tiny_tasks):
    mix = _mixture(tiny_tasks, 0.5)
    plain = TrainInputs(mix, LENGTHS, 16, seed=9)
    procs = TrainInputs(mix, LENGTHS, 16, seed=9, stream_processes=True)
    try:
        for _ in range(4):
            a, b = next(plain), next(procs)
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
        st = procs.get_state()
        procs.set_state(st)  # restarts the processes at the checkpointed cursors
        a, b = next(plain), next(procs)
        np.testing.assert_array_equal(a["encoder_input_tokens"], b["encoder_input_tokens"])
    finally:
        procs.shutdown()


def test_task_registration_is_idempotent_and_guards_names(tiny_vocab, tiny_tasks):
    import seqio

    from mnmt.data.tasks import register_synthetic_tasks

    again = register_synthetic_tasks("cpu-tiny", tiny_vocab, eval_size=300)
    assert again == tiny_tasks  # same definition: harmless
    import logging

    from mnmt.data.tasks import get_task_info

    caplog_records = []
    handler = logging.Handler()
    handler.emit = caplog_records.append
    logging.getLogger("mnmt.data.tasks").addHandler(handler)
    try:
        # a different vocabulary under the same names replaces the tasks (with a warning) ...
        other = tiny_vocab.replace("spm.model", "spm_copy.model")
        import shutil

        shutil.copy(tiny_vocab, other)
        register_synthetic_tasks("cpu-tiny", other, eval_size=300)
        assert get_task_info(tiny_tasks["en-de"]).vocab_path == other
        assert any("different definition" in r.getMessage() for r in caplog_records)
    finally:
        logging.getLogger("mnmt.data.tasks").removeHandler(handler)
        register_synthetic_tasks("cpu-tiny", tiny_vocab, eval_size=300)  # ... and back
    assert get_task_info(tiny_tasks["en-de"]).vocab_path == tiny_vocab
    seqio.TaskRegistry.add(
        "synth_foreign_cpu_tiny_s0_en_de_e300",
        source=seqio.FunctionDataSource(lambda split, shuffle_files: None, splits=["train"]),
        output_features={},
    )
    with pytest.raises(ValueError, match="not registered by mnmt.data.tasks"):
        register_synthetic_tasks("cpu-tiny", tiny_vocab, eval_size=300, prefix="synth_foreign")


def test_shards_split_finite_sets_and_reseed_streams(tiny_vocab):
    import seqio

    from mnmt.data.tasks import register_synthetic_tasks

    capped = register_synthetic_tasks("cpu-tiny", tiny_vocab, caps={"en-zh": 30}, eval_size=50)
    name = capped["en-zh"]

    def epoch(index):
        it = TrainInputs(name, LENGTHS, 6, seed=0, pack=False,
                         shard_info=seqio.ShardInfo(index=index, num_shards=2))
        rows = [r for _ in range(5) for r in next(it)["decoder_target_tokens"]]  # 5 x 3 rows
        return {tuple(r[r != 0]) for r in rows}

    a, b = epoch(0), epoch(1)
    assert len(a) == len(b) == 15 and not a & b  # disjoint halves of the 30 examples
    un = capped["en-de"]  # unlimited stream: each shard draws its own stream
    x = next(TrainInputs(un, LENGTHS, 8, seed=0, shard_info=(0, 2)))["decoder_target_tokens"]
    y = next(TrainInputs(un, LENGTHS, 8, seed=0, shard_info=(1, 2)))["decoder_target_tokens"]
    assert x.shape == (4, 32) and not np.array_equal(x, y)
    with pytest.raises(ValueError, match="multiple of num_shards"):
        TrainInputs(un, LENGTHS, 7, seed=0, shard_info=(0, 2))
