"""benchmarks/speed/input_pipeline.py: one JSON object with the required fields and a consistent ratio."""

import json

import pytest


@pytest.fixture
def bench(benchmark_script):
    return benchmark_script("input_pipeline")


def _run(bench, capsys, vocab, *extra):
    assert bench.main(["--json", "--vocab", vocab, "--batches", "4", "--batch_size", "8",
                          "--no_seqio", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_fields_and_headroom_against_a_given_trainer_rate(bench, capsys, tiny_vocab):
    r = _run(bench, capsys, tiny_vocab, "--trainer_steps_per_s", "5")
    assert r["examples_per_s"] > 0 and r["tokens_per_s"] > r["examples_per_s"]
    assert r["examples_per_row"] > 1.5  # packed
    assert r["trainer_rows_per_s"] == 5 * 8
    assert r["headroom_vs_trainer"] == pytest.approx(r["rows_per_s"] / 40)
    assert r["trainer"]["examples_per_s"] == pytest.approx(40 * r["examples_per_row"])
    # interleaved rounds: the worst round is at most the mean, the best round at least
    assert r["headroom_vs_trainer_min_round"] <= r["headroom_vs_trainer"] * (1 + 1e-9)
    assert r["headroom_vs_trainer_best"] >= r["headroom_vs_trainer"] * (1 - 1e-9)


@pytest.mark.slow
def test_measures_the_trainer_step(bench, capsys, tiny_vocab):
    r = _run(bench, capsys, tiny_vocab, "--trainer_steps", "2", "--rounds", "2")
    t = r["trainer"]
    assert t["size"] == "mini-1" and t["steps_timed"] == 2
    assert 0 < t["sec_per_step_best"] <= t["sec_per_step"]
    assert r["headroom_vs_trainer"] == pytest.approx(r["rows_per_s"] / (8 / t["sec_per_step"]))
