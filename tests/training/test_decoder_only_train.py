"""Decoder-only runs end to end (Caillaut et al. 2024 §3.3-3.5) on the tiny synthetic tasks.

The pipeline's rows hold `source </src> <2xx> target <eos>` examples with loss weights on the
target only, one segment per example; a mini-dec-1 run learns, resumes exactly, evaluates the
per-target-token loss that `score_batch` gives and decodes with the prompted beam search; a
vocabulary without the separator is refused at once.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from run_helpers import LENGTHS, rows_by_key

from mnmt.training import run_files

ROW = LENGTHS["inputs"] + LENGTHS["targets"]


@pytest.fixture(scope="module")
def dec_data(tmp_path_factory):
    """cpu-tiny tasks with a 512-piece vocabulary that has the separator </src>."""
    from mnmt.data import mixtures, synthetic, tasks, vocab

    out = tmp_path_factory.mktemp("dec_vocab")
    path = vocab.train_vocabulary(synthetic.get_family("cpu-tiny"), str(out), 512,
                                  n_per_pair=2000, separator=True)
    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", path, eval_size=24, prefix="dec")
    mixture = mixtures.register_weighted_mixture(
        "dec_train_p50", {t: 0.5 for t in pair_tasks.values()})
    sp = vocab.get_vocabulary(path).tokenizer
    return {"vocab": path, "tasks": pair_tasks, "mixture": mixture,
            "sep": vocab.separator_id(vocab.get_vocabulary(path)),
            "lang": {pair: sp.piece_to_id(vocab.lang_piece(pair.split("-")[1]))
                     for pair in pair_tasks}}


def _config(data, model_dir, **overrides):
    from mnmt.training.config import (
        CheckpointConfig,
        DecodeConfig,
        EvalConfig,
        InputConfig,
        TrainConfig,
    )

    base = TrainConfig(
        model_dir=str(model_dir), model_size="mini-dec-1", vocabulary_path=data["vocab"],
        train_steps=40,
        inputs=InputConfig(mixture_or_task_name=data["mixture"], feature_lengths=dict(LENGTHS),
                           batch_size=8),
        eval=EvalConfig(tasks=dict(data["tasks"]), period=20, batch_size=16),
        decode=DecodeConfig(at_end=True, num_examples=8), checkpoint=CheckpointConfig(period=10),
        log_every=5, warmup_steps=4, learning_rate=0.5, tensorboard=False, peak_flops=1e9,
        run_id="dec")
    return base.updated(**overrides)


@pytest.fixture(scope="module")
def reference(dec_data, tmp_path_factory):
    """One uninterrupted 40-step mini-dec-1 run (decoding at the end)."""
    from mnmt.training.trainer import train

    config = _config(dec_data, tmp_path_factory.mktemp("dec_ref") / "ref")
    events = []
    summary = train(config, progress=events.append)
    return config, summary, events


# ---- the input pipeline ------------------------------------------------------------------
def _segments(batch, row):
    """(tokens, loss weights, positions, inputs) of each segment of one row, in order."""
    seg = batch["decoder_segment_ids"][row]
    out = []
    for s in sorted(set(seg[seg > 0].tolist())):
        idx = np.flatnonzero(seg == s)
        assert np.array_equal(idx, np.arange(idx[0], idx[-1] + 1)), "a segment is split"
        out.append(tuple(batch[k][row, idx] for k in (
            "decoder_target_tokens", "decoder_loss_weights", "decoder_positions",
            "decoder_input_tokens")))
    return out


def _rows_of_first_windows(inputs, windows: int):
    """Every row of the iterator's first `windows` windows (one row per batch)."""
    rows = []
    while inputs.get_state()["window_start"] < windows * inputs.window:
        rows.append(next(inputs))
    return rows


def test_pipeline_rows_are_caillaut_examples_of_the_same_draws(dec_data):
    """Each segment is `source </src> <2xx> target <eos>` with weights on target + EOS only,
    segments never share an id, padding carries nothing; and the examples of the first
    decoder-only window are exactly the encoder-decoder iterator's first draws, reformatted."""
    from mnmt.data.pipeline import TrainInputs

    sep, langs = dec_data["sep"], set(dec_data["lang"].values())
    dec = TrainInputs(dec_data["mixture"], LENGTHS, 1, seed=3, architecture="decoder_only")
    assert dec.window == ROW and dec.get_state()["architecture"] == "decoder_only"
    rows = _rows_of_first_windows(dec, 1)
    got = []
    for b in rows:
        assert b["decoder_target_tokens"].shape == (1, ROW)
        tokens = b["decoder_target_tokens"][0]
        assert not b["decoder_loss_weights"][0][tokens == 0].any(), "weight on padding"
        assert not b["decoder_segment_ids"][0][tokens == 0].any()
        for tok, w, pos, inp in _segments(b, 0):
            (k,) = np.flatnonzero(tok == sep)  # exactly one separator
            assert tok[k + 1] in langs and tok[-1] == 1
            assert k <= LENGTHS["inputs"] - 2 and len(tok) - k - 2 <= LENGTHS["targets"]
            np.testing.assert_array_equal(w, [0] * (k + 2) + [1] * (len(tok) - k - 2))
            np.testing.assert_array_equal(pos, np.arange(len(tok)))
            np.testing.assert_array_equal(inp, np.concatenate([[0], tok[:-1]]))
            got.append((tuple(tok[:k]), int(tok[k + 1]), tuple(tok[k + 2:-1])))
    assert len(got) == dec.window  # every draw of the window, none lost or repeated
    assert max(len(_segments(b, 0)) for b in rows) > 1, "nothing was packed"

    enc = TrainInputs(dec_data["mixture"], LENGTHS, 1, seed=3)
    want = []
    for b in _rows_of_first_windows(enc, dec.window // enc.window):
        ein, eseg = b["encoder_input_tokens"][0], b["encoder_segment_ids"][0]
        dtg, dseg = b["decoder_target_tokens"][0], b["decoder_segment_ids"][0]
        for s in sorted(set(eseg[eseg > 0].tolist())):
            src, tgt = ein[eseg == s], dtg[dseg == s]
            want.append((tuple(src[1:-1]), int(src[0]), tuple(tgt[:-1])))
    assert sorted(got) == sorted(want)


def test_pipeline_position_resumes_exactly(dec_data):
    from mnmt.data.pipeline import TrainInputs

    a = TrainInputs(dec_data["mixture"], LENGTHS, 8, seed=1, architecture="decoder_only")
    for _ in range(5):
        next(a)
    state = a.get_state()
    after = [next(a) for _ in range(6)]
    b = TrainInputs(dec_data["mixture"], LENGTHS, 8, seed=1, architecture="decoder_only")
    b.set_state(state)
    for x, y in zip(after, [next(b) for _ in range(6)], strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])
    enc = TrainInputs(dec_data["mixture"], LENGTHS, 8, seed=1)
    with pytest.raises(ValueError, match="architecture"):
        enc.set_state(state)  # an encoder-decoder iterator refuses a decoder-only position


def test_eval_rows_match_the_encoder_decoder_examples(dec_data):
    """The same trimmed examples as the encoder-decoder eval batches, and the same number of
    target tokens (so both architectures' `loss` divide by the same count)."""
    from mnmt.data.pipeline import eval_batches

    task = dec_data["tasks"]["en-de"]
    dec = list(eval_batches(task, "validation", LENGTHS, 16, architecture="decoder_only"))
    enc = list(eval_batches(task, "validation", LENGTHS, 16))
    assert len(dec) == len(enc) == 2
    for d, e in zip(dec, enc, strict=True):
        assert d["decoder_target_tokens"].shape == (16, ROW)
        assert d["decoder_loss_weights"].sum() == e["decoder_loss_weights"].sum()
        for i in range(16):
            if not e["decoder_loss_weights"][i].any():  # a padding row of the last batch
                assert not d["decoder_target_tokens"][i].any()
                continue
            src = e["encoder_input_tokens"][i][e["encoder_input_tokens"][i] > 0]
            tgt = e["decoder_target_tokens"][i][e["decoder_target_tokens"][i] > 0]
            want = [*src[1:-1], dec_data["sep"], *src[:1], *tgt]
            row = d["decoder_target_tokens"][i]
            np.testing.assert_array_equal(row[row > 0], want)


# ---- training ------------------------------------------------------------------------------
def test_loss_falls_and_the_run_directory_is_complete(reference):
    config, summary, _ = reference
    assert summary.status == "finished" and summary.final_step == 40
    run = run_files.read_run_json(config.model_dir)
    assert run["model"]["config"]["architecture"] == "decoder_only"
    assert run["model"]["params"]["encoder"] == 0
    rows = rows_by_key(run_files.read_metrics(config.model_dir))
    train = [rows[(s, "all", "train", "train_loss")] for s in range(5, 41, 5)]
    assert train[-1] < train[0] - 1.0, train
    for pair in ("en-de", "en-zh"):
        assert rows[(40, pair, "validation", "loss")] < rows[(20, pair, "validation", "loss")]
        assert summary.final_eval[pair] == pytest.approx(rows[(40, pair, "validation", "loss")])


def test_decoding_at_the_end_writes_bleu_and_chrf_rows(reference):
    config, summary, _ = reference
    rows = rows_by_key(run_files.read_metrics(config.model_dir))
    for pair in ("en-de", "en-zh"):
        bleu, chrf = rows[(40, pair, "validation", "bleu")], rows[(40, pair, "validation", "chrf")]
        assert 0.0 <= bleu <= 100.0 and 0.0 < chrf <= 100.0
        assert summary.final_metrics[f"{pair}/validation/chrf"] == chrf


def test_eval_loss_is_per_target_token_cross_entropy_by_hand(reference, dec_data):
    """The `loss` rows equal Σ −log p(target tokens and EOS) / their number, with the examples
    built by hand from the raw eval texts and scored by `score_batch` and by a log-softmax."""
    import jax

    from mnmt.data.pipeline import eval_examples
    from mnmt.data.vocab import get_vocabulary
    from mnmt.models.decoder_only import DecoderOnlyModel, pack_examples
    from mnmt.models.zoo import get_config
    from mnmt.training.checkpoints import Checkpointer

    config, _, _ = reference
    ck = Checkpointer(os.path.join(config.model_dir, "checkpoints"))
    state, meta = ck.restore_raw(40)
    ck.close()
    params = state["params"]
    sp = get_vocabulary(dec_data["vocab"]).tokenizer
    model = DecoderOnlyModel(get_config("mini-dec-1", sp.get_piece_size()))
    rows = rows_by_key(run_files.read_metrics(config.model_dir))
    for pair, task in dec_data["tasks"].items():
        examples = []
        for src, tgt in eval_examples(task, "validation"):
            s = sp.EncodeAsIds(src)[: LENGTHS["inputs"] - 2]
            t = sp.EncodeAsIds(tgt)[: LENGTHS["targets"] - 1] + [1]
            examples.append(([*s, dec_data["sep"], dec_data["lang"][pair], *t],
                             [0.0] * (len(s) + 2) + [1.0] * len(t)))
        batch = {k: np.concatenate([pack_examples([ex], ROW)[k] for ex in examples])
                 for k in pack_examples(examples[:1], ROW)}
        nll, ntok = jax.jit(model.score_batch)(params, batch)
        logits = np.asarray(model.apply(params, batch), np.float64)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        picked = np.take_along_axis(logp, batch["decoder_target_tokens"][..., None], -1)[..., 0]
        w = batch["decoder_loss_weights"]
        by_hand = float(-(picked * w).sum() / w.sum())
        assert float(np.sum(ntok)) == w.sum() == sum(sum(x[1]) for x in examples)
        assert float(np.sum(nll) / np.sum(ntok)) == pytest.approx(by_hand, rel=1e-5)
        assert rows[(40, pair, "validation", "loss")] == pytest.approx(by_hand, rel=1e-5)


class _Stop(Exception):
    pass


def test_interrupted_then_resumed_run_equals_the_uninterrupted_one(reference, dec_data,
                                                                   tmp_path):
    """Stopped abruptly at step 25 (no checkpoint there: the last one is step 20), then
    resumed: the same rows, values and token counts as the uninterrupted run."""
    from mnmt.training.trainer import train

    ref_config, _, _ = reference
    config = _config(dec_data, tmp_path / "resumed")

    def stop_at_25(event):
        if event.kind == "train" and event.step == 25:
            raise _Stop

    with pytest.raises(_Stop):
        train(config, progress=stop_at_25)
    assert run_files.read_run_json(config.model_dir)["status"] == "running"
    assert max(r["step"] for r in run_files.read_metrics(config.model_dir)) == 25
    events = []
    summary = train(config, progress=events.append)
    assert summary.status == "finished"
    assert any("resumed from checkpoint at step 20" in e.message for e in events)
    _assert_same_rows(ref_config.model_dir, config.model_dir)


def _assert_same_rows(a_dir, b_dir) -> None:
    """The same metrics rows (no duplicates), values and token counts in both run directories."""
    a = run_files.read_metrics(a_dir)
    b = run_files.read_metrics(b_dir)
    ka = [(r["step"], r["task"], r["eval_set"], r["metric"]) for r in a]
    kb = [(r["step"], r["task"], r["eval_set"], r["metric"]) for r in b]
    assert len(kb) == len(set(kb)) and sorted(ka) == sorted(kb)
    ra, rb = rows_by_key(a), rows_by_key(b)
    for key, value in ra.items():
        assert rb[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert {(r["step"], r["metric"]): r["tokens"] for r in a} == \
        {(r["step"], r["metric"]): r["tokens"] for r in b}


@pytest.mark.slow
def test_sigkill_at_a_random_event_then_resume_equals_the_uninterrupted_run(
        reference, dec_data, tmp_path):
    """SIGKILL of a child process at a random progress event (train, eval, decode or
    checkpoint), then resume here. MNMT_TEST_KILL_EVENT=i reproduces a failing draw."""
    import random
    import signal

    from run_helpers import run_child, write_child_spec

    from mnmt.training.trainer import train

    ref_config, _, events = reference
    points = events[:-1]  # every event but the final "finished"
    index = int(os.environ.get("MNMT_TEST_KILL_EVENT") or random.randrange(len(points)))
    where = f"kill_event={index} ({points[index].kind} at step {points[index].step})"
    print(where)
    config = _config(dec_data, tmp_path / "killed")
    spec = write_child_spec(config, dec_data, tmp_path, kill_event=index, signal="KILL",
                            task_prefix="dec")
    res = run_child(spec)
    assert res.returncode == -signal.SIGKILL, (where, res.stderr[-2000:])
    summary = train(config, progress=lambda e: None)
    assert summary.status == "finished", where
    _assert_same_rows(ref_config.model_dir, config.model_dir)


def test_grouped_decoder_only_runs_match_the_run_trained_alone(reference, dec_data, tmp_path):
    from mnmt.data import mixtures
    from mnmt.training.trainer import train_group

    ref_config, _, _ = reference
    other = mixtures.register_weighted_mixture(
        "dec_train_p80", {t: w for t, w in zip(dec_data["tasks"].values(), (0.8, 0.2),
                                               strict=True)})
    group = [_config(dec_data, tmp_path / "a", train_steps=20),
             _config(dec_data, tmp_path / "b", train_steps=20, seed=3, run_id="dec_b",
                     inputs={"mixture_or_task_name": other})]
    summaries = train_group(group, progress=lambda e: None)
    assert [s.status for s in summaries] == ["finished", "finished"]
    ref = rows_by_key(run_files.read_metrics(ref_config.model_dir))
    mine = rows_by_key(run_files.read_metrics(group[0].model_dir))
    for key, value in mine.items():
        if key[3] in ("loss", "train_loss", "learning_rate"):
            assert value == pytest.approx(ref[key], rel=1e-3, abs=1e-6), key
    theirs = rows_by_key(run_files.read_metrics(group[1].model_dir))
    for rows in (mine, theirs):
        assert {(k[1], k[3]) for k in rows if k[0] == 20 and k[3] in ("bleu", "chrf")} == {
            (p, m) for p in ("en-de", "en-zh") for m in ("bleu", "chrf")}
    assert theirs[(20, "en-de", "validation", "loss")] != mine[(20, "en-de", "validation", "loss")]


# ---- the separator ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain_vocab(tmp_path_factory):
    """A vocabulary trained without the separator (as every encoder-decoder study's)."""
    from mnmt.data import synthetic, vocab

    out = tmp_path_factory.mktemp("plain_vocab")
    return vocab.train_vocabulary(synthetic.get_family("cpu-tiny"), str(out), 512,
                                  n_per_pair=300)


def test_a_vocabulary_without_the_separator_is_refused_at_once(dec_data, plain_vocab, tmp_path):
    from mnmt.data import tasks
    from mnmt.data.pipeline import TrainInputs
    from mnmt.data.vocab import get_vocabulary, has_separator
    from mnmt.training.trainer import train

    assert not has_separator(get_vocabulary(plain_vocab))
    config = _config(dec_data, tmp_path / "nosep", vocabulary_path=plain_vocab)
    with pytest.raises(ValueError) as err:
        train(config, progress=lambda e: None)
    text = str(err.value)
    assert "\n" not in text and plain_vocab in text and "</src>" in text
    assert "mnmt-vocab --separator" in text
    assert not os.path.exists(os.path.join(config.model_dir, "run.json"))
    plain_tasks = tasks.register_synthetic_tasks("cpu-tiny", plain_vocab, eval_size=24,
                                                 prefix="decplain")
    with pytest.raises(ValueError, match="has no separator piece") as err:
        TrainInputs(plain_tasks["en-de"], LENGTHS, 8, seed=0, architecture="decoder_only")
    assert plain_vocab in str(err.value)


def test_the_separator_is_opt_in_and_keeps_the_language_ids(dec_data, plain_vocab):
    from mnmt.data import vocab

    plain = vocab.get_vocabulary(plain_vocab).tokenizer
    with_sep = vocab.get_vocabulary(dec_data["vocab"]).tokenizer
    for code in ("de", "en", "zh"):
        assert plain.piece_to_id(vocab.lang_piece(code)) == \
            with_sep.piece_to_id(vocab.lang_piece(code))
    assert with_sep.id_to_piece(dec_data["sep"]) == vocab.SEPARATOR_PIECE
    assert dec_data["sep"] == 3 + 3  # right after pad, EOS, UNK and the three language tokens


# ---- planning and accounting -----------------------------------------------------------------
def test_mesh_plan_compiles_a_decoder_only_step_over_rows_of_inputs_plus_targets():
    from mnmt.models import accounting, zoo
    from mnmt.study.mesh_plan import compile_step
    from mnmt.study.spec import StudySpec

    spec = StudySpec.of(sizes=("mini-dec-1",), weights=(0.5,), train_steps=60)
    plan = compile_step(spec, "mini-dec-1", (1, 1))
    assert "error" not in plan and plan["decoder_only"] is True
    cfg = zoo.get_config("mini-dec-1", spec.vocab_size)
    lengths = dict(spec.schedule.feature_lengths)
    assert plan["params"] == accounting.param_counts(cfg).total
    per_row = accounting.train_flops_per_example(cfg, lengths["inputs"], lengths["targets"])
    assert plan["model_flops_per_step"] == pytest.approx(per_row * plan["rows"])
    # one row is one sequence of inputs + targets tokens: at least 6·N·(I + T)
    row = lengths["inputs"] + lengths["targets"]
    six_n = 6 * (accounting.param_counts(cfg).non_embedding + cfg.vocab_size * cfg.emb_dim) * row
    assert six_n <= per_row < 1.5 * six_n
    assert plan["batch_bytes"] > 0


def test_a_study_trains_its_vocabulary_with_the_separator_only_for_decoder_only_sizes():
    from mnmt.study.spec import StudySpec
    from mnmt.study.stages import decoder_only_sizes, needs_separator

    assert not needs_separator(StudySpec())  # the default study keeps its vocabulary's ids
    assert not needs_separator(StudySpec.of(sizes=("micro-1", "mini-1")))
    assert decoder_only_sizes(StudySpec.of(sizes=("mini-1", "mini-dec-2"))) == ["mini-dec-2"]
    assert needs_separator(StudySpec.of(sizes=("mini-1",), heldout=(("mini-dec-1", 0.5),)))
