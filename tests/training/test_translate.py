"""`mnmt-translate` against the trainer's own decode, and full-split decoding at chosen steps.

One tiny run (mini-1, 8 steps, checkpoints at 4 and 8) decodes the whole validation split
(`DecodeConfig.num_examples = 0`) at step 4 (`DecodeConfig.steps`) and at the end; the
hypotheses the trainer scored are captured from `evaluation.decode_and_score`. `mnmt-translate`
on the same sources must write exactly those hypotheses at each checkpoint, and its scores must
be sacrebleu's on what it wrote. A decoder-only run is checked the same way.
"""

from __future__ import annotations

import io
import json
import sys

import pytest
import sacrebleu
from run_helpers import LENGTHS, small_run_config

from mnmt.training import evaluation, run_files, translate

PAIR = "en-de"


def _capture_trainer_decodes(monkeypatch) -> list:
    """Every `decode_and_score` result of the trainer, with all its examples kept."""
    seen = []
    original = evaluation.decode_and_score

    def spy(*args, **kwargs):
        kwargs["keep_examples"] = 10**6
        scores = original(*args, **kwargs)
        seen.append((args[5], scores))  # (pair, scores)
        return scores

    monkeypatch.setattr(evaluation, "decode_and_score", spy)
    return seen


def _train(config, monkeypatch) -> dict:
    """Train `config`; the trainer's decodes of PAIR by step (the decode steps in order)."""
    from mnmt.training.trainer import train

    seen = _capture_trainer_decodes(monkeypatch)
    summary = train(config, progress=lambda e: None)
    assert summary.status == "finished"
    steps = sorted(set(config.decode.steps) | {config.train_steps})
    mine = [scores for pair, scores in seen if pair == PAIR]
    assert len(mine) == len(steps)
    return dict(zip(steps, mine, strict=True))


def _write_split(tmp_path, task: str) -> tuple[str, str, list[str], list[str]]:
    from mnmt.data.pipeline import eval_examples

    examples = eval_examples(task, "validation")
    src, ref = tmp_path / "valid.en", tmp_path / "valid.de"
    src.write_text("".join(s + "\n" for s, _ in examples), encoding="utf-8")
    ref.write_text("".join(t + "\n" for _, t in examples), encoding="utf-8")
    return str(src), str(ref), [s for s, _ in examples], [t for _, t in examples]


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """(run dir, trainer decodes by step, split files) of an 8-step encoder-decoder run."""
    monkeypatch = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("translate_run")
    # a small learning rate: still near the random start, whose outputs vary with the source
    config = small_run_config(tiny_data, tmp / "run", "translate", checkpoint_period=4).updated(
        train_steps=8, eval={"period": 8}, learning_rate=0.02,
        decode={"at_end": True, "steps": (4,), "num_examples": 0})
    try:
        decodes = _train(config, monkeypatch)
    finally:
        monkeypatch.undo()
    split = _write_split(tmp, tiny_data["tasks"][PAIR])
    return str(tmp / "run"), decodes, split


def _translate(capsys, *argv: str) -> tuple[int, str, str]:
    rc = translate.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_translate_writes_the_trainers_hypotheses_at_each_checkpoint(trained, tmp_path, capsys):
    run_dir, decodes, (src, ref, sources, refs) = trained
    assert sorted(decodes) == [4, 8]
    hyps = {}
    for step, scores in decodes.items():
        # the whole split was decoded (num_examples = 0), at the chosen step and at the end
        assert scores.num_examples == len(sources) == 24
        out = tmp_path / f"hyp{step}.de"
        rc, stdout, err = _translate(capsys, run_dir, "--checkpoint", str(step), "--input", src,
                                     "--reference", ref, "--output", str(out), "--pair", PAIR,
                                     "--batch-size", "16", "--json")
        assert rc == 0, err
        summary = json.loads(stdout)
        assert summary["checkpoint_step"] == step and summary["sentences"] == 24
        hyps[step] = out.read_text(encoding="utf-8").splitlines()
        trainer_hyps = [h for _, h, _ in scores.examples]
        assert hyps[step] == trainer_hyps
        assert [r for _, _, r in scores.examples] == refs
        # the metrics rows the trainer wrote are the scores of these hypotheses
        rows = {(r["step"], r["task"], r["metric"]): r["value"]
                for r in run_files.read_metrics(run_dir) if r["eval_set"] == "validation"}
        assert summary["bleu"] == pytest.approx(rows[(step, PAIR, "bleu")], abs=1e-9)
        assert summary["chrf"] == pytest.approx(rows[(step, PAIR, "chrf")], abs=1e-9)
        # and sacrebleu's own corpus scores of the file written
        bleu = sacrebleu.corpus_bleu(hyps[step], [refs], tokenize="13a").score
        chrf = sacrebleu.corpus_chrf(hyps[step], [refs]).score
        assert summary["bleu"] == pytest.approx(bleu, abs=1e-9)
        assert summary["chrf"] == pytest.approx(chrf, abs=1e-9)
    assert hyps[4] != hyps[8]  # two different checkpoints were restored
    assert len(set(hyps[8])) > 3  # real translations, not one repeated string

    # without --checkpoint: the newest
    rc, stdout, err = _translate(capsys, run_dir, "--input", src, "--pair", PAIR,
                                 "--batch-size", "16", "--quiet")
    assert rc == 0, err
    assert stdout.splitlines() == hyps[8]


def test_stdin_input_and_other_batch_size(trained, monkeypatch, capsys):
    run_dir, decodes, (_, _, sources, _) = trained
    lines = sources[:5]
    stdin = io.TextIOWrapper(io.BytesIO("".join(s + "\n" for s in lines).encode("utf-8")))
    monkeypatch.setattr(sys, "stdin", stdin)
    shapes = []
    predict = translate.Translator.predict

    def recording(self, batch):
        shapes.append({k: v.shape for k, v in batch.items()})
        return predict(self, batch)

    monkeypatch.setattr(translate.Translator, "predict", recording)
    rc, stdout, err = _translate(capsys, run_dir, "--input", "-", "--pair", PAIR,
                                 "--batch-size", "2", "--quiet")
    assert rc == 0, err
    assert stdout.splitlines() == [h for _, h, _ in decodes[8].examples][:5]
    assert err == ""  # --quiet
    # 5 lines in 3 batches of one shape (the last padded): one compilation of the search
    assert len(shapes) == 3 and all(s == shapes[0] for s in shapes)
    assert shapes[0]["encoder_input_tokens"] == (2, LENGTHS["inputs"])


def test_unknown_step_lists_the_available_ones(trained, capsys):
    run_dir, _, (src, _, _, _) = trained
    rc, _, err = _translate(capsys, run_dir, "--checkpoint", "7", "--input", src, "--pair", PAIR)
    assert rc == 2
    assert "no checkpoint at step 7" in err and "available steps 4, 8" in err


def test_reference_line_count_mismatch_names_both_files(trained, tmp_path, capsys):
    run_dir, _, (src, _, _, _) = trained
    short = tmp_path / "short.de"
    short.write_text("one\ntwo\n", encoding="utf-8")
    rc, _, err = _translate(capsys, run_dir, "--input", src, "--reference", str(short),
                            "--pair", PAIR)
    assert rc == 2
    assert f"reference file {short} has 2 lines but input file {src} has 24" in err


def test_pair_choice_and_truncation_warning(trained, tmp_path, capsys):
    run_dir, _, (_, _, sources, _) = trained
    text = tmp_path / "in.en"
    text.write_text(sources[0] + "\n" + " ".join([sources[1]] * 8) + "\n", encoding="utf-8")
    rc, _, err = _translate(capsys, run_dir, "--input", str(text))
    assert rc == 2 and "has 2 pairs (en-de, en-zh): choose one with --pair" in err
    rc, _, err = _translate(capsys, run_dir, "--input", str(text), "--pair", "en-dee")
    assert rc == 2 and "did you mean 'en-de'" in err
    rc, stdout, err = _translate(capsys, run_dir, "--input", str(text), "--pair", "en-zh")
    assert rc == 0, err
    assert len(stdout.splitlines()) == 2
    assert err.count("warning:") == 1 and "1 of 2 input lines" in err


def test_run_directory_errors(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a\n", encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = _translate(capsys, str(empty), "--input", str(src))
    assert rc == 2 and f"run directory {empty} is empty" in err
    (empty / "metrics.jsonl").write_text("")
    rc, _, err = _translate(capsys, str(empty), "--input", str(src))
    assert rc == 2 and f"{empty} has no run.json" in err
    rc, _, err = _translate(capsys, str(tmp_path / "missing"), "--input", str(src))
    assert rc == 2 and "does not exist" in err


def test_unreadable_vocabulary_is_named(trained, tmp_path, capsys):
    run_dir, _, (src, _, _, _) = trained
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a sentencepiece model")
    copy = tmp_path / "run"
    copy.mkdir()
    run = run_files.read_run_json(run_dir)
    run["vocabulary"] = {"path": str(bad), "size": 512}
    run_files.write_run_json(str(copy), run)
    rc, _, err = _translate(capsys, str(copy), "--input", src, "--pair", PAIR)
    assert rc == 2 and f"cannot read the SentencePiece vocabulary {bad}" in err


def test_decode_progress_lines_only_for_long_decodes():
    clock = iter([0.0, 1.0, 2.0, 12.0, 12.0, 13.0, 13.0])
    lines = []
    progress = evaluation.DecodeProgress(lines.append, 100, label="x", interval_s=10,
                                         clock=lambda: next(clock))
    progress.update(10)          # t = 1: too early
    progress.update(20)          # t = 2
    assert lines == []
    progress.update(60)          # t = 12: a line (60 sentences in 12 s: 5/s, 8 s left)
    assert lines == ["x: 60/100 sentences, 5.0 sentences/s, ETA 0:08"]
    progress.update(65)          # t = 13: within the interval
    progress.finish()            # t = 13: the last line, since one was printed
    assert len(lines) == 2 and lines[1].startswith("x: 65/100 sentences")
    quiet = evaluation.DecodeProgress(lines.append, 5, clock=lambda: 0.0)
    quiet.update(5)
    quiet.finish()
    assert len(lines) == 2


def test_num_examples_must_not_be_negative(tiny_data, tmp_path):
    from mnmt.training.run_setup import build_setup

    config = small_run_config(tiny_data, tmp_path / "neg", "neg").updated(
        decode={"num_examples": -1})
    with pytest.raises(ValueError, match=r"decode.num_examples must be an int ≥ 0"):
        build_setup(config)


# ---------------------------------------------------------------------------- decoder-only
@pytest.fixture(scope="module")
def decoder_only_run(tmp_path_factory):
    """A 12-step mini-dec-1 run with Caillaut's <eos> prefix and source-language tags, decoding
    its whole validation split at the end (its own vocabulary with the separator, and another
    model to compile: ≈ 1 min on 2 cores)."""
    from mnmt.data import mixtures, synthetic, tasks, vocab
    from mnmt.training.config import (
        CheckpointConfig,
        DecodeConfig,
        EvalConfig,
        InputConfig,
        TrainConfig,
    )

    tmp = tmp_path_factory.mktemp("translate_dec")
    path = vocab.train_vocabulary(synthetic.get_family("cpu-tiny"), str(tmp), 512,
                                  n_per_pair=2000, separator=True)
    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", path, eval_size=24, prefix="trdec")
    mixture = mixtures.register_weighted_mixture(
        "trdec_p50", {t: 0.5 for t in pair_tasks.values()})
    config = TrainConfig(
        model_dir=str(tmp / "run"), model_size="mini-dec-1", vocabulary_path=path,
        train_steps=12,
        inputs=InputConfig(mixture_or_task_name=mixture, feature_lengths=dict(LENGTHS),
                           batch_size=8, prefix_eos=True, source_language_tags=True),
        eval=EvalConfig(tasks=dict(pair_tasks), period=12, batch_size=16),
        decode=DecodeConfig(at_end=True, num_examples=0), checkpoint=CheckpointConfig(period=12),
        log_every=4, warmup_steps=4, learning_rate=0.02, tensorboard=False, peak_flops=1e9,
        run_id="trdec")
    monkeypatch = pytest.MonkeyPatch()
    try:
        decodes = _train(config, monkeypatch)
    finally:
        monkeypatch.undo()
    return str(tmp / "run"), decodes[12], _write_split(tmp, pair_tasks[PAIR])


@pytest.mark.slow
def test_decoder_only_translate_equals_the_trainers_decode(decoder_only_run, tmp_path, capsys):
    run_dir, scores, (src, ref, sources, refs) = decoder_only_run
    out = tmp_path / "hyp.de"
    rc, stdout, err = _translate(capsys, run_dir, "--input", src, "--reference", ref,
                                 "--output", str(out), "--pair", PAIR, "--batch-size", "16",
                                 "--json")
    assert rc == 0, err
    summary = json.loads(stdout)
    assert summary["architecture"] == "decoder_only" and summary["checkpoint_step"] == 12
    run = translate.load_run(run_dir)
    assert run.decoder_options.prefix_eos and run.decoder_options.source_language_tags
    hyps = out.read_text(encoding="utf-8").splitlines()
    assert hyps == [h for _, h, _ in scores.examples] and len(set(hyps)) > 3
    assert summary["chrf"] == pytest.approx(scores.chrf, abs=1e-9)
    assert summary["bleu"] == pytest.approx(scores.bleu, abs=1e-9)


def test_a_study_binding_decodes_whole_splits_at_chosen_steps():
    """`mnmt-study --gin DecodeConfig.num_examples=0 --gin 'DecodeConfig.steps=(200,)'` reaches
    every run's DecodeConfig (the study's training options, mnmt.study.train_options)."""
    from mnmt.study import stages
    from mnmt.study.test_utils import run_configs

    spec = stages.load_spec(None, "ci", ["DecodeConfig.num_examples=0",
                                         "DecodeConfig.steps=(200,)"])
    decodes = [config.decode for config in run_configs(spec)]
    assert len(decodes) > 1
    for decode in decodes:
        assert decode.num_examples == 0 and tuple(decode.steps) == (200,)
        assert decode.beam_size == 4  # the rest as before


def test_an_unreadable_checkpoint_is_named_and_the_newest_readable_one_is_used(trained, tmp_path,
                                                                               capsys):
    import shutil
    from pathlib import Path

    run_dir, decodes, (src, _, _, _) = trained
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    step = copy / "checkpoints" / "step_8"
    manifest = step / "state" / "manifest.ocdbt"
    manifest.write_bytes(manifest.read_bytes()[: manifest.stat().st_size // 2])
    rc, _, err = _translate(capsys, str(copy), "--checkpoint", "8", "--input", src,
                            "--pair", PAIR)
    assert rc == 2 and f"checkpoint step 8 ({step}) cannot be restored" in err
    rc, stdout, err = _translate(capsys, str(copy), "--input", src, "--pair", PAIR,
                                 "--batch-size", "16", "--json", "--output",
                                 str(tmp_path / "hyp"))
    assert rc == 0, err
    assert json.loads(stdout)["checkpoint_step"] == 4  # the newest that restores
    assert Path(tmp_path / "hyp").read_text(encoding="utf-8").splitlines() == \
        [h for _, h, _ in decodes[4].examples]
    assert manifest.exists()  # read-only: the unreadable checkpoint is left where it is
