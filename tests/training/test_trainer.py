"""End-to-end behaviour of mnmt.training.trainer.train on the tiny synthetic tasks (mini-1, CPU)."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal

import jax
import numpy as np
import pytest
from run_helpers import assert_same_metrics, rows_by_key, run_child, write_child_spec

from mnmt.training import run_files
from mnmt.training.run_files import RunMismatchError


@pytest.fixture(scope="module")
def reference_run(tiny_data, tmp_path_factory):
    """One uninterrupted 12-step run shared by the tests that compare against it."""
    from run_helpers import LENGTHS

    from mnmt.training.config import (
        CheckpointConfig,
        DecodeConfig,
        EvalConfig,
        InputConfig,
        TrainConfig,
    )
    from mnmt.training.trainer import train

    d = tmp_path_factory.mktemp("ref") / "ref"
    config = TrainConfig(
        model_dir=str(d), model_size="mini-1", vocabulary_path=tiny_data["vocab"],
        train_steps=12,
        inputs=InputConfig(mixture_or_task_name=tiny_data["mixture"],
                           feature_lengths=dict(LENGTHS), batch_size=8),
        eval=EvalConfig(tasks=dict(tiny_data["tasks"]), period=6, batch_size=16),
        decode=DecodeConfig(at_end=False), checkpoint=CheckpointConfig(period=4),
        log_every=2, warmup_steps=4, learning_rate=0.5, tensorboard=True, peak_flops=1e9,
        run_id="ref")
    events = []
    summary = train(config, progress=events.append)
    return config, summary, events


def test_run_directory_follows_the_metrics_schema(reference_run):
    config, summary, events = reference_run
    assert summary.status == "finished" and summary.final_step == 12
    run = run_files.read_run_json(config.model_dir)
    assert run["schema_version"] == 1 and run["status"] == "finished"
    assert run["run_id"] == "ref" and run["model"]["size"] == "mini-1"
    assert run["model"]["family"] == "mini"
    p = run["model"]["params"]
    assert p["total"] == p["embedding"] + p["non_embedding"]
    assert p["non_embedding"] == p["encoder"] + p["decoder"]
    assert run["mixture"]["weights"] == {"en-de": 0.5, "en-zh": 0.5}
    assert run["mixture"]["tasks"] == config.eval.tasks
    assert run["training"]["batch_tokens"] == 8 * 16
    assert len(run["vocabulary"]["sha256"]) == 64 and run["versions"]["jax"] == jax.__version__
    rows = run_files.read_metrics(config.model_dir)
    keys = [(r["step"], r["task"], r["eval_set"], r["metric"]) for r in rows]
    assert len(keys) == len(set(keys)), "duplicate rows"
    assert all(set(r) == {"run_id", "step", "tokens", "task", "eval_set", "metric", "value"}
               for r in rows)
    loss_steps = sorted({k[0] for k in keys if k[3] == "loss"})
    assert loss_steps == [6, 12]
    assert {k[1] for k in keys if k[3] == "loss"} == {"en-de", "en-zh"}
    train_steps = sorted(k[0] for k in keys if k[3] == "train_loss" and k[1] == "all")
    assert train_steps == [2, 4, 6, 8, 10, 12]
    assert all(k[1:3] == ("all", "train") for k in keys if k[3] == "learning_rate")
    # a train_loss row per pair beside "all" at every log step (both pairs drawn in each window)
    assert sorted((k[0], k[1]) for k in keys if k[3] == "train_loss") == [
        (s, t) for s in train_steps for t in ("all", "en-de", "en-zh")]
    assert all(k[2] == "train" for k in keys if k[3] == "train_loss")
    tokens = [r["tokens"] for r in rows if r["metric"] == "train_loss" and r["task"] == "all"]
    assert all(b > a for a, b in zip(tokens, tokens[1:], strict=False))
    assert tokens[-1] == summary.tokens
    # training reduces the eval loss; final_eval is the step-12 validation loss
    by = rows_by_key(rows)
    for pair in ("en-de", "en-zh"):
        assert by[(12, pair, "validation", "loss")] < by[(6, pair, "validation", "loss")]
        assert summary.final_eval[pair] == pytest.approx(by[(12, pair, "validation", "loss")])
    assert sorted(os.listdir(os.path.join(config.model_dir, "checkpoints"))) == [
        "step_12", "step_8"]
    tb = _tensorboard_scalars(os.path.join(config.model_dir, "events"))
    for pair in ("en-de", "en-zh"):
        for step in (6, 12):
            assert tb[("eval", f"validation/{pair}/loss", step)] == pytest.approx(
                by[(step, pair, "validation", "loss")], rel=1e-6)
    for step in (2, 4, 6, 8, 10, 12):
        assert tb[("train", "loss", step)] == pytest.approx(
            by[(step, "all", "train", "train_loss")], rel=1e-6)
        assert ("train", "mfu", step) in tb and ("train", "tokens_per_s", step) in tb
    train_events = [e for e in events if e.kind == "train"]
    assert [e.step for e in train_events] == [2, 4, 6, 8, 10, 12]
    last = train_events[-1]
    assert last.steps_per_s > 0 and last.tokens_per_s > 0 and last.mfu > 0
    assert last.eta_s == pytest.approx(0.0, abs=1e-6)


def test_train_loss_of_all_is_the_token_weighted_mean_of_the_pairs(reference_run, tiny_data):
    """Each window's `all` row is Σ_pair N_pair · L_pair / Σ N_pair, with N_pair the pair's
    target tokens in the window's batches (read again from the seeded input pipeline), and the
    pairs' values really differ; the per-pair rows also reach TensorBoard."""
    from mnmt.data.pipeline import TrainInputs

    config, _, _ = reference_run
    inputs = TrainInputs(tiny_data["mixture"], config.inputs.feature_lengths, 8, seed=0,
                         task_ids=True)
    pairs = {t: p for p, t in tiny_data["tasks"].items()}
    pairs = [pairs[t] for t in inputs.tasks]
    counts = np.zeros((12, len(pairs)))
    for step in range(12):
        ids = next(inputs)["decoder_task_ids"]
        counts[step] = [(ids == k + 1).sum() for k in range(len(pairs))]
    rows = rows_by_key(run_files.read_metrics(config.model_dir))
    tb = _tensorboard_scalars(os.path.join(config.model_dir, "events"))
    for end in range(2, 13, 2):
        n = counts[end - 2:end].sum(axis=0)
        values = np.array([rows[(end, p, "train", "train_loss")] for p in pairs])
        assert rows[(end, "all", "train", "train_loss")] == pytest.approx(
            np.dot(n, values) / n.sum(), rel=1e-5)
        for p, v in zip(pairs, values, strict=True):
            assert tb[("train", f"{p}/loss", end)] == pytest.approx(v, rel=1e-6)
    assert abs(rows[(12, "en-de", "train", "train_loss")]
               - rows[(12, "en-zh", "train", "train_loss")]) > 0.05


def _tensorboard_scalars(events_dir: str) -> dict[tuple[str, str, int], float]:
    """(writer, tag, step) -> value of every scalar in MODEL_DIR/events/{train,eval}."""
    import tensorflow as tf

    out = {}
    for writer in sorted(os.listdir(events_dir)):
        for name in sorted(os.listdir(os.path.join(events_dir, writer))):
            path = os.path.join(events_dir, writer, name)
            for event in tf.compat.v1.train.summary_iterator(path):
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name == "scalars":
                        out[(writer, value.tag, int(event.step))] = float(
                            tf.make_ndarray(value.tensor))
    return out


def test_eval_loss_is_pure_per_token_cross_entropy(make_config, tiny_data):
    """`loss` rows ignore label smoothing and z-loss: recompute them from the checkpoint."""
    import optax

    from mnmt.data.pipeline import eval_batches
    from mnmt.models.encoder_decoder import EncoderDecoderModel
    from mnmt.models.zoo import get_config
    from mnmt.training.checkpoints import Checkpointer
    from mnmt.training.trainer import train

    config = make_config("ls", train_steps=4, eval={"period": 4}, label_smoothing=0.2,
                         z_loss=0.01)
    train(config, progress=lambda e: None)
    ck = Checkpointer(os.path.join(config.model_dir, "checkpoints"))
    state, meta = ck.restore_raw(4)
    params = state["params"]
    assert meta["step"] == 4
    ck.close()
    model = EncoderDecoderModel(get_config("mini-1", 512))
    rows = rows_by_key(run_files.read_metrics(config.model_dir))
    for pair, task in tiny_data["tasks"].items():
        nll, ntok = 0.0, 0.0
        for b in eval_batches(task, "validation", config.inputs.feature_lengths, 16):
            logits = model.apply(params, b)
            ce = optax.softmax_cross_entropy_with_integer_labels(
                logits, b["decoder_target_tokens"])
            w = b["decoder_loss_weights"]
            nll += float(np.sum(np.asarray(ce) * w))
            ntok += float(np.sum(w))
        assert rows[(4, pair, "validation", "loss")] == pytest.approx(nll / ntok, rel=1e-5)


def test_sigkill_at_a_random_step_then_resume_matches_uninterrupted(
        reference_run, make_config, tiny_data, tmp_path):
    """SIGKILL (no handler runs) at a random progress event of the run — after a training
    row, an evaluation or a checkpoint of any step — then resume in a fresh process.
    MNMT_TEST_KILL_EVENT=i reproduces a failing draw."""
    ref_config, _, ref_events = reference_run
    from mnmt.training.trainer import train

    points = ref_events[:-1]  # every event but the final "finished"
    index = int(os.environ.get("MNMT_TEST_KILL_EVENT") or random.randrange(len(points)))
    killed_at = points[index]
    where = f"kill_event={index} ({killed_at.kind} at step {killed_at.step})"
    print(where)  # shown by pytest when the test fails
    config = make_config("killed", run_id="ref", tensorboard=True)
    res = run_child(write_child_spec(config, tiny_data, tmp_path, kill_event=index, signal="KILL"))
    assert res.returncode == -signal.SIGKILL, (where, res.stderr[-2000:])
    assert run_files.read_run_json(config.model_dir)["status"] == "running", where
    rows_before = run_files.read_metrics(config.model_dir)
    assert max(r["step"] for r in rows_before) == killed_at.step, where
    summary = train(config, progress=lambda e: None)
    assert summary.status == "finished" and summary.final_step == 12
    assert_same_metrics(ref_config.model_dir, config.model_dir)
    assert sorted(os.listdir(os.path.join(config.model_dir, "checkpoints"))) == [
        "step_12", "step_8"]  # keep-N holds across the kill


def test_sigterm_checkpoints_and_stops_then_resumes(reference_run, make_config, tiny_data,
                                                     tmp_path):
    ref_config, _, _ = reference_run
    from mnmt.training.trainer import train

    config = make_config("termed", run_id="ref")
    res = run_child(write_child_spec(config, tiny_data, tmp_path, kill_at=6, signal="TERM"))
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])[0]
    assert out["status"] == "preempted" and out["final_step"] == 6
    assert out["stop_signal"] == 15  # SIGTERM: what mnmt-study turns into exit 143
    assert "step_6" in os.listdir(os.path.join(config.model_dir, "checkpoints"))
    summary = train(config, progress=lambda e: None)
    assert summary.status == "finished"
    assert_same_metrics(ref_config.model_dir, config.model_dir)


def test_finished_run_returns_immediately_without_writing(reference_run):
    from mnmt.training.trainer import train

    config, first, _ = reference_run
    before = open(os.path.join(config.model_dir, "metrics.jsonl")).read()
    events = []
    summary = train(config, progress=events.append)
    assert summary.status == "finished" and summary.final_step == 12
    assert summary.final_eval == pytest.approx(first.final_eval)
    assert open(os.path.join(config.model_dir, "metrics.jsonl")).read() == before
    assert not [e for e in events if e.kind == "train"]


def test_refuses_to_resume_into_a_different_run(reference_run):
    from mnmt.training.trainer import train

    config, _, _ = reference_run
    with pytest.raises(RunMismatchError) as e:
        train(dataclasses.replace(config, model_size="mini-2"))
    assert "model.size" in str(e.value) and "mini-1" in str(e.value) and "mini-2" in str(e.value)
    with pytest.raises(RunMismatchError, match="mixture.weights"):
        train(dataclasses.replace(config, mixture_weights={"en-de": 0.3, "en-zh": 0.7}))


def test_nonfinite_loss_stops_and_keeps_last_good_checkpoint(make_config):
    from mnmt.training.checkpoints import Checkpointer
    from mnmt.training.optimizer import OptimizerConfig
    from mnmt.training.trainer import train

    # An absurd step size without Adafactor's update clipping blows the parameters up after
    # the first update; the step-1 checkpoint is the last good state.
    config = make_config("nan", learning_rate=1e30, warmup_steps=1, warmup="constant",
                         checkpoint={"period": 1}, optimizer=OptimizerConfig(
                             clipping_threshold=None, multiply_by_parameter_scale=False))
    messages = []
    summary = train(config, progress=lambda e: messages.append(e.message))
    assert summary.status == "diverged"
    assert "non-finite" in summary.message and "step 1" in summary.message
    ck = Checkpointer(os.path.join(config.model_dir, "checkpoints"))
    assert ck.all_steps() == [1]
    state, _ = ck.restore_raw()
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state["params"]))
    ck.close()
    assert run_files.read_run_json(config.model_dir)["status"] == "diverged"
    assert any("non-finite" in m for m in messages)


def test_decoding_writes_bleu_and_chrf_rows(make_config):
    """Loss rows for every pair and eval set at every eval step; BLEU/ChrF rows at the
    configured decode steps and at the end, and nowhere else."""
    from mnmt.training.trainer import train

    config = make_config("dec", train_steps=3, eval={"period": 2, "sets": ("validation", "ood")},
                         decode={"at_end": True, "steps": (1,), "num_examples": 4,
                                 "beam_size": 2, "max_length": 8})
    summary = train(config, progress=lambda e: None)
    rows = rows_by_key(run_files.read_metrics(config.model_dir))
    steps = {m: sorted({k[0] for k in rows if k[3] == m}) for m in ("loss", "bleu", "chrf")}
    assert steps == {"loss": [2, 3], "bleu": [1, 3], "chrf": [1, 3]}
    for pair in ("en-de", "en-zh"):
        for es in ("validation", "ood"):
            for step in (2, 3):
                assert rows[(step, pair, es, "loss")] > 0
            for step in (1, 3):
                bleu, chrf = rows[(step, pair, es, "bleu")], rows[(step, pair, es, "chrf")]
                assert 0.0 <= bleu <= 100.0 and 0.0 <= chrf <= 100.0
            assert summary.final_metrics[f"{pair}/{es}/chrf"] == rows[(3, pair, es, "chrf")]
        # the two eval sets are different data, so their losses differ
        assert rows[(3, pair, "validation", "loss")] != rows[(3, pair, "ood", "loss")]
    assert summary.final_eval == {p: rows[(3, p, "validation", "loss")]
                                  for p in ("en-de", "en-zh")}  # the first eval set


def test_logical_axis_rules_are_configurable(make_config):
    """T5X's standard rules by default; `TrainConfig.logical_axis_rules` replaces them."""
    from jax.sharding import PartitionSpec as P

    from mnmt.models import partitioning
    from mnmt.training.run_setup import build_setup

    def mlpwrite_child_spec(config):
        shardings = build_setup(config).params_shardings_fn(None)
        return shardings["decoder"]["layers_0"]["mlp"]["wi_0"].spec

    assert mlpwrite_child_spec(make_config("rules_default")) == P(None, "model")
    custom = tuple(partitioning.standard_logical_axis_rules(additional_rules=[("mlp", None)]))
    assert mlpwrite_child_spec(make_config("rules_custom", logical_axis_rules=custom)) == P(None, None)


def test_batch_tokens_and_gradient_accumulation(make_config):
    """batch_tokens sets the rows per step; accumulating 2 micro-batches changes nothing."""
    from mnmt.training.trainer import train

    a = make_config("acc1", train_steps=4, eval={"period": 4},
                    inputs={"batch_size": 1, "batch_tokens": 8 * 16})
    b = make_config("acc2", train_steps=4, eval={"period": 4}, gradient_accumulation_steps=2)
    train(a, progress=lambda e: None)
    train(b, progress=lambda e: None)
    assert run_files.read_run_json(a.model_dir)["training"]["batch_size"] == 8
    ra = rows_by_key(run_files.read_metrics(a.model_dir))
    rb = rows_by_key(run_files.read_metrics(b.model_dir))
    assert ra.keys() == rb.keys()
    for k in ra:
        assert rb[k] == pytest.approx(ra[k], rel=1e-4), k


def _checkpoint_shardings(step_dir: str) -> dict[str, dict]:
    """Tree path ("params.decoder.…") -> the NamedSharding Orbax recorded for that array."""
    import base64

    with open(os.path.join(step_dir, "state", "_sharding")) as f:
        raw = json.load(f)
    return {base64.b64decode(k).decode(): json.loads(v) for k, v in raw.items()}


def test_data_and_model_parallel_mesh_then_resume_on_one_device(reference_run, make_config,
                                                                tiny_data, tmp_path):
    """Steps 1-6 on a 2x2 ('data', 'model') mesh of 4 CPU devices (stopped by SIGTERM), steps
    7-12 on one device: the parameters and their optimizer slots are sharded by the T5X
    standard rules, the checkpoint is resharded on restore, and the metrics equal the
    single-device reference run's.

    A different partitioning sums in a different order; at this test's learning rate (0.5 on
    8 rows) the run amplifies such rounding differences about 1000x within six steps (a
    one-device run in a fresh process differs from the reference by ~3e-3 at step 12, ~1e-6
    up to step 8), so rows after step 8 are compared at 2e-2."""
    ref_config, _, _ = reference_run
    from mnmt.training.trainer import train

    config = make_config("mesh", run_id="ref", mesh_shape=(2, 2))
    res = run_child(write_child_spec(config, tiny_data, tmp_path, kill_at=6, signal="TERM"),
                 extra_env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])[0]["status"] == "preempted"
    sh = _checkpoint_shardings(os.path.join(config.model_dir, "checkpoints", "step_6"))
    emb = sh["params.token_embedder.embedding"]
    assert emb["shape"] == [2, 2] and emb["axis_names"] == ["data", "model"]
    assert emb["partition_spec"] == ["model", None]                 # vocab over 'model'
    mlp = [v["partition_spec"] for k, v in sh.items()
           if k.startswith("params.") and k.endswith("mlp.wi_0")]
    assert mlp and all(spec == [None, "model"] for spec in mlp)     # mlp over 'model'
    slot = sh["opt_state.0.v.token_embedder.embedding"]             # follows its parameter
    assert slot["partition_spec"] == ["model", None]
    assert sh["step"]["partition_spec"] == []                       # scalars replicated

    summary = train(dataclasses.replace(config, mesh_shape=(-1, 1)), progress=lambda e: None)
    assert summary.status == "finished" and summary.final_step == 12
    ref = rows_by_key(run_files.read_metrics(ref_config.model_dir))
    got = run_files.read_metrics(config.model_dir)
    keys = [(r["step"], r["task"], r["eval_set"], r["metric"]) for r in got]
    assert sorted(keys) == sorted(ref), "missing, extra or duplicate rows"
    got = rows_by_key(got)
    for k, v in ref.items():
        assert got[k] == pytest.approx(v, rel=2e-4 if k[0] <= 8 else 2e-2, abs=1e-6), k
