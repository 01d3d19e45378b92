"""Probe evaluations (`EvalConfig.probe_every`): `probe_loss` rows on a fixed probe set per pair."""

from __future__ import annotations

import numpy as np
import pytest
from run_helpers import LENGTHS, assert_same_metrics, cut_back, rows_by_key

from mnmt.training import run_files

PROBE = "probe_loss"


def _probe_rows(model_dir: str) -> dict[tuple, float]:
    return {k: v for k, v in rows_by_key(run_files.read_metrics(model_dir)).items()
            if k[3] == PROBE}


def test_probe_batches_keep_the_first_examples_in_their_batches():
    from mnmt.training.evaluation import probe_batches

    def batch(real: int, rows: int = 4) -> dict[str, np.ndarray]:
        w = np.zeros((rows, 3), np.int32)
        w[:real] = 1
        return {"decoder_loss_weights": w, "decoder_target_tokens": w * 7,
                "targets_text": np.array(["x"] * rows, dtype=object)}

    out = probe_batches(iter([batch(4), batch(4), batch(2)]), 6)
    assert len(out) == 2 and "targets_text" not in out[0]
    assert out[0]["decoder_loss_weights"].sum(axis=1).tolist() == [3, 3, 3, 3]
    assert out[1]["decoder_loss_weights"].sum(axis=1).tolist() == [3, 3, 0, 0]
    assert out[1]["decoder_target_tokens"][2:].sum() == 0  # a zeroed row is a padding row
    whole = probe_batches(iter([batch(4), batch(2)]), 100)  # fewer: the whole split
    assert sum(int((b["decoder_loss_weights"].sum(axis=1) > 0).sum()) for b in whole) == 6
    with pytest.raises(ValueError, match="probe_examples"):
        probe_batches(iter([batch(4)]), 0)


def test_probe_rows_at_their_steps_equal_the_loss_of_their_examples(make_config, tiny_data):
    """probe_every=3 writes probe_loss rows of every pair at 3, 6, 9, 12; probing the whole
    split (24 examples) gives the eval loss at the eval steps, and probing 10 examples gives the
    loss of the split's first 10 examples computed independently from the last checkpoint."""
    import jax

    from mnmt.data.eval_inputs import eval_batches
    from mnmt.training.evaluation import evaluate_loss
    from mnmt.training.trainer import train
    from mnmt.training.translate import load_run

    whole = make_config("whole", eval={"probe_every": 3, "probe_examples": 24})
    part = make_config("part", eval={"probe_every": 3, "probe_examples": 10})
    for config in (whole, part):
        summary = train(config, progress=lambda e: None)
        assert summary.status == "finished" and 0 < summary.probe_s < summary.wall_s
    rows = rows_by_key(run_files.read_metrics(whole.model_dir))
    probes = _probe_rows(whole.model_dir)
    assert sorted(probes) == sorted((s, p, "validation", PROBE) for s in (3, 6, 9, 12)
                                    for p in ("en-de", "en-zh"))
    for step in (6, 12):
        for pair in ("en-de", "en-zh"):
            assert probes[(step, pair, "validation", PROBE)] == pytest.approx(
                rows[(step, pair, "validation", "loss")], rel=1e-6)
    mine = _probe_rows(part.model_dir)
    trained = load_run(part.model_dir, checkpoint=12)
    score = jax.jit(trained.model.score_batch)
    for pair, task in tiny_data["tasks"].items():
        first = next(eval_batches(task, "validation", LENGTHS, 10))  # exactly 10 examples
        expected, tokens = evaluate_loss(score, trained.params, [first], lambda b: b)
        assert tokens > 0
        assert mine[(12, pair, "validation", PROBE)] == pytest.approx(expected, rel=1e-5)
        # a subset differs from the whole split: the rows really are of 10 examples
        assert mine[(12, pair, "validation", PROBE)] != pytest.approx(
            rows_by_key(run_files.read_metrics(part.model_dir))[(12, pair, "validation", "loss")],
            rel=1e-6)


def test_probe_rows_of_a_resumed_group_equal_the_uninterrupted_ones(make_config):
    """A group killed after writing its step-10 rows, with its last checkpoint at step 8,
    resumes from step 8 and ends with exactly the uninterrupted group's rows: the probe rows of
    step 10 are not written twice, those of step 12 are computed again and equal."""
    from mnmt.training.trainer import train_group

    def group(prefix):
        return [make_config(f"{prefix}_{m}", seed=seed, checkpoint={"keep": 3},
                            eval={"probe_every": 2, "probe_examples": 8})
                for m, seed in (("a", 0), ("b", 3))]

    whole, cut = group("whole"), group("cut")
    for g in (whole, cut):
        assert [s.status for s in train_group(g, progress=lambda e: None)] == ["finished"] * 2
    for c in cut:
        cut_back(c.model_dir, checkpoint=8, rows=10)
    assert [s.status for s in train_group(cut, progress=lambda e: None)] == ["finished"] * 2
    for w, c in zip(whole, cut, strict=True):
        assert_same_metrics(w.model_dir, c.model_dir, rtol=1e-5)  # no duplicates, none lost
        assert sorted(k[0] for k in _probe_rows(c.model_dir) if k[1] == "en-de") == [
            2, 4, 6, 8, 10, 12]


def test_probe_settings_are_checked_naming_the_field(make_config):
    from mnmt.training.trainer import train

    with pytest.raises(ValueError, match="eval.probe_every"):
        train(make_config("bad_every", eval={"probe_every": -1}), progress=lambda e: None)
    with pytest.raises(ValueError, match="eval.probe_examples"):
        train(make_config("bad_examples", eval={"probe_every": 2, "probe_examples": 0}),
              progress=lambda e: None)


def test_probe_cost_benchmark_measures_a_known_scatter(benchmark_script):
    """benchmarks/speed/probe_cost.py's two scatter estimates recover a curve's known relative noise
    (2 % on a power law), and read a noiseless curve as flat."""
    bench = benchmark_script("probe_cost")
    steps = np.arange(100.0, 2001.0, 10.0)
    curve = 0.5 + 3.0 * steps ** -0.5
    noisy = curve * np.exp(0.02 * np.random.default_rng(0).standard_normal(steps.size))
    assert bench.smooth_scatter(steps, noisy) == pytest.approx(0.02, rel=0.15)
    assert bench.second_difference_scatter(noisy) == pytest.approx(0.02, rel=0.15)
    assert bench.smooth_scatter(steps, curve) < 1e-3
    assert bench.second_difference_scatter(curve) < 1e-3
