"""Upstream T5X can train on a mixture registered by mnmt, unchanged, through `seqio.get_dataset`.

T5X's trainer reads a mixture as `seqio.get_dataset(name, task_feature_lengths, dataset_split,
shuffle, feature_converter=EncDecFeatureConverter(pack=True))`; our trainer reads the same
registered mixture through `mnmt.data.pipeline.TrainInputs` (packed, as `HostInputs` builds it).
The two differ by design in one respect only: which example comes next. TrainInputs draws the
pair of every example from its own counter-based seeded stream (so its position is exact and
checkpointable: see its module docstring) and visits a finite training set in a seeded
permutation per epoch, where seqio samples members with `tf.data` and reads a split in file
order. So these tests assert the exact relation that holds:

1. format: the same features, dtypes and row length as what our train step consumes;
2. packing: given seqio's own mixture stream of examples, our packer in TrainInputs' windows
   gives, element for element, the rows `seqio.get_dataset` gives;
3. content: over one epoch of a finite training set, the packed rows of both hold exactly the
   same multiset of (inputs, targets) token sequences.
"""

from collections import Counter

import numpy as np
import pytest

from mnmt.data.pipeline import TrainInputs, pack_examples

LENGTHS = {"inputs": 32, "targets": 32}
CAP = 64  # training examples per pair of the finite tasks: two packing windows of 32


@pytest.fixture(scope="module")
def mixture(tiny_tasks) -> str:
    """A two-pair study mixture (p=0.3), registered as `mnmt.study.runner` registers a run's."""
    from mnmt.data.mixtures import register_weighted_mixture

    return register_weighted_mixture("upstream_compat_p0.30",
                                     {tiny_tasks["en-de"]: 0.3, tiny_tasks["en-zh"]: 0.7})


def t5x_rows(name: str, pack: bool = True, seed: int = 0):
    """The rows upstream T5X's trainer would read (before it batches them)."""
    import seqio

    ds = seqio.get_dataset(name, task_feature_lengths=LENGTHS, dataset_split="train",
                           shuffle=False, seed=seed,
                           feature_converter=seqio.EncDecFeatureConverter(pack=pack))
    return ds.as_numpy_iterator()


def unpack(row: dict) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (inputs, targets) token sequences packed into one row, in segment order."""
    out = []
    for s in np.unique(row["encoder_segment_ids"][row["encoder_segment_ids"] > 0]):
        inputs = row["encoder_input_tokens"][row["encoder_segment_ids"] == s]
        targets = row["decoder_target_tokens"][row["decoder_segment_ids"] == s]
        out.append((tuple(int(t) for t in inputs), tuple(int(t) for t in targets)))
    return out


def test_t5x_reads_our_mixture_in_the_format_our_trainer_feeds(mixture):
    ours = next(TrainInputs(mixture, LENGTHS, 8, seed=0))
    theirs = [row for _, row in zip(range(8), t5x_rows(mixture), strict=False)]
    assert len(theirs) == 8
    assert set(theirs[0]) == set(ours)
    for key, value in ours.items():
        stacked = np.stack([row[key] for row in theirs])
        assert stacked.dtype == value.dtype and stacked.shape == value.shape, key
    assert sum(len(unpack(row)) for row in theirs) > 8  # seqio packed several examples per row


def test_our_packing_of_seqios_mixture_stream_equals_t5x_rows(mixture):
    import seqio

    window = TrainInputs(mixture, LENGTHS, 8, seed=0).window
    assert window == max(LENGTHS.values())
    stream = seqio.get_mixture_or_task(mixture).get_dataset(LENGTHS, split="train", shuffle=False,
                                                            seed=0)
    examples = [(list(x["inputs"]), list(x["targets"]))
                for _, x in zip(range(3 * window), stream.as_numpy_iterator(), strict=False)]
    ours = []
    for start in range(0, len(examples), window):
        rows = pack_examples(examples[start:start + window], LENGTHS)
        ours += [{k: v[r] for k, v in rows.items()} for r in range(len(rows["decoder_target_tokens"]))]
    theirs = [row for _, row in zip(range(len(ours)), t5x_rows(mixture), strict=False)]
    assert len(theirs) == len(ours) > 3
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert set(a) == set(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"row {i} {key}")


def test_one_epoch_of_a_finite_task_holds_the_same_examples(tiny_vocab):
    from mnmt.data.mixtures import register_weighted_mixture
    from mnmt.data.tasks import register_synthetic_tasks

    capped = register_synthetic_tasks("cpu-tiny", tiny_vocab, caps=CAP, eval_size=50)
    # the p=1.0 run of a two-pair study: the other pair stays a member with weight 0
    name = register_weighted_mixture("upstream_compat_p1.00",
                                     {capped["en-de"]: 1.0, capped["en-zh"]: 0.0})
    theirs = [ex for row in t5x_rows(name) for ex in unpack(row)]  # one epoch: num_epochs=1
    assert len(theirs) == CAP
    ours_it = TrainInputs(name, LENGTHS, 1, seed=5)
    ours: list = []
    while len(ours) < CAP:  # rows never straddle packing windows, so this stops at CAP exactly
        ours += unpack({k: v[0] for k, v in next(ours_it).items()})
    assert len(ours) == CAP
    assert Counter(ours) == Counter(theirs)
