"""The micro family: capacity-limited sizes below mini-1 for the CPU study's size law."""

from __future__ import annotations

import pytest

from mnmt.models import zoo
from mnmt.models.accounting import param_counts
from mnmt.models.test_utils import param_tree_counts


def test_micro_sizes_grow_and_stay_below_mini_1():
    counts = [param_counts(zoo.get_config(s)).non_embedding for s in zoo.sizes("micro")]
    mini_1 = param_counts(zoo.get_config("mini-1")).non_embedding
    assert counts == sorted(counts) and len(set(counts)) == len(counts) == 3
    assert counts[-1] < mini_1
    # the study's sizes span a wide range of N: smallest micro to mini-1 is at least 5x
    assert mini_1 / counts[0] >= 5


@pytest.mark.parametrize("size", ["micro-1", "micro-3"])
def test_micro_counts_equal_the_initialised_tree(size):
    config = zoo.get_config(size, vocab_size=1024)
    tree = param_tree_counts(config)
    pc = param_counts(config)
    assert tree["total"] == pc.total
    assert tree["encoder"] == pc.encoder and tree["decoder"] == pc.decoder


def test_unknown_micro_size_names_the_range():
    with pytest.raises(ValueError, match="micro-1 … micro-3"):
        zoo.get_config("micro-4")


def test_nano_sizes_sit_below_micro_1():
    nano = [param_counts(zoo.get_config(s)).non_embedding for s in zoo.sizes("nano")]
    micro_1 = param_counts(zoo.get_config("micro-1")).non_embedding
    assert nano == sorted(nano) and nano[-1] < micro_1
    tree = param_tree_counts(zoo.get_config("nano-1", vocab_size=1024))
    assert tree["total"] == param_counts(zoo.get_config("nano-1", vocab_size=1024)).total
