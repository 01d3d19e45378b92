"""Shared fixtures: one small shared vocabulary and the cpu-tiny tasks (built once per session)."""

import pytest


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory) -> str:
    from mnmt.data.synthetic import get_family
    from mnmt.data.vocab import train_vocabulary

    out = tmp_path_factory.mktemp("vocab")
    return train_vocabulary(get_family("cpu-tiny"), str(out), 600, n_per_pair=2000)


@pytest.fixture(scope="session")
def tiny_tasks(tiny_vocab) -> dict:
    from mnmt.data.tasks import register_synthetic_tasks

    return register_synthetic_tasks("cpu-tiny", tiny_vocab, eval_size=300)
