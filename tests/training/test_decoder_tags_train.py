"""Caillaut's decoder-only tags and <eos> prefix reached from gin through `mnmt-train`.

`InputConfig.source_language_tags`, `.domains` and `.prefix_eos` bound on the command line:
mnmt-train trains the vocabulary with the domain tags, and the training rows and the decoding
prompts carry `<eos> … </src> <2xx> <2en> <dom_…>` — checked on mnmt-train's own steps up to
the first batch (fast) and on a 2-step mini-dec-1 run through `train.main` (slow). An
encoder-decoder size with an option set, and a vocabulary without a configured domain tag, are
refused in one line naming the field / the token and the file.
"""

from __future__ import annotations

import json
import os

import gin
import numpy as np
import pytest

from mnmt.data import pipeline, tasks, vocab
from mnmt.training import evaluation
from mnmt.training import train as train_cli

DOMAINS = "{'en-de': 'news', 'en-zh': 'legal'}"


@pytest.fixture(autouse=True)
def _clear_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _argv(model_dir, vocab_path, *extra):
    return ["--gin_file=runs/cpu_tiny.gin", f"--gin.MODEL_DIR='{model_dir}'",
            "--gin.MODEL_SIZE='mini-dec-1'", "--gin.TRAIN_STEPS=2", "--gin.EVAL_PERIOD=2",
            "--gin.BATCH_SIZE=4", "--gin.TASK_FEATURE_LENGTHS={'inputs': 12, 'targets': 12}",
            f"--gin.VOCABULARY_PATH='{vocab_path}'", "--gin.setup_tasks.vocab_size=512",
            "--gin.EvalConfig.batch_size=4", "--gin.DecodeConfig.num_examples=2",
            "--gin.DecodeConfig.beam_size=1", "--gin.DecodeConfig.max_length=4",
            "--gin.TrainConfig.tensorboard=False", "--gin.TrainConfig.log_every=1", "--quiet",
            *extra]


TAG_BINDINGS = ("--gin.InputConfig.source_language_tags=True",
                f"--gin.InputConfig.domains={DOMAINS}", "--gin.InputConfig.prefix_eos=True")


def _small_data(mp, seen):
    """mnmt-train's vocabulary on 500 examples per pair and 8 eval examples per pair (instead of
    20,000 and 2,000: the same code, faster); records the vocabulary's symbols, the training
    batches and the decoding prompts in `seen`."""
    train_vocabulary, register = vocab.train_vocabulary, tasks.register_synthetic_tasks
    produce, prompts_of = pipeline.TrainInputs._produce, evaluation.decoder_prompts

    def small_vocabulary(family, out_dir, size, **kwargs):
        seen["vocabulary"] = kwargs
        return train_vocabulary(family, out_dir, size, n_per_pair=500, **kwargs)

    def record_produce(self):
        seen.setdefault("train", []).append(produce(self))
        return seen["train"][-1]

    def record_prompts(*args, **kwargs):
        seen.setdefault("prompts", []).append(prompts_of(*args, **kwargs))
        return seen["prompts"][-1]

    mp.setattr(vocab, "train_vocabulary", small_vocabulary)
    mp.setattr(tasks, "register_synthetic_tasks",
               lambda preset, path, **kw: register(preset, path, **{**kw, "eval_size": 8}))
    mp.setattr(pipeline.TrainInputs, "_produce", record_produce)
    mp.setattr(evaluation, "decoder_prompts", record_prompts)


def _ids(vocab_path):
    v = vocab.get_vocabulary(str(vocab_path))
    sp = v.tokenizer
    return {"sep": vocab.separator_id(v), "en": sp.piece_to_id(vocab.lang_piece("en")),
            "lang": {p: sp.piece_to_id(vocab.lang_piece(p[3:])) for p in ("en-de", "en-zh")},
            "dom": {"en-de": vocab.domain_token_id(v, "news"),
                    "en-zh": vocab.domain_token_id(v, "legal")}}


@pytest.fixture(scope="module")
def gin_setup(tmp_path_factory):
    """mnmt-train's steps up to its first batch (no training): the gin file and the bindings
    parsed, TrainConfig built, setup_tasks with `vocabulary_symbols` (the vocabulary trained
    here), `build_setup`; its first training batch and first en-zh eval batch."""
    from mnmt.training import run_setup
    from mnmt.training.config import TrainConfig

    tmp = tmp_path_factory.mktemp("dec_tags_gin")
    seen: dict = {}
    mp = pytest.MonkeyPatch()
    _small_data(mp, seen)
    gin.clear_config()
    try:
        args, bindings = train_cli.parse_args(_argv(tmp / "run", tmp / "vocab" / "spm.model",
                                                    *TAG_BINDINGS))
        train_cli.parse_gin(args.gin_file, bindings, args.gin_search_paths)
        config = TrainConfig()
        pair_tasks = train_cli.setup_tasks(**train_cli.vocabulary_symbols(config))
        config = config.updated(eval={"tasks": dict(pair_tasks)})
        setup = run_setup.build_setup(config)
        inputs = setup.make_inputs()
        batch = next(inputs)
        inputs.close()
        eval_batch = next(iter(setup.eval_batches(pair_tasks["en-zh"], "validation")))
    finally:
        mp.undo()
        gin.clear_config()
    return {"config": config, "seen": seen, "batch": batch, "eval_batch": eval_batch,
            "vocab": tmp / "vocab" / "spm.model", "ids": _ids(tmp / "vocab" / "spm.model")}


@pytest.fixture(scope="module")
def tagged_run(tmp_path_factory):
    """The 2-step run through `train.main`; records its training batches and decoding prompts."""
    tmp = tmp_path_factory.mktemp("dec_tags")
    seen: dict = {}
    mp = pytest.MonkeyPatch()
    _small_data(mp, seen)
    gin.clear_config()
    try:
        rc = train_cli.main(_argv(tmp / "run", tmp / "vocab" / "spm.model", *TAG_BINDINGS))
    finally:
        mp.undo()
        gin.clear_config()
    return {"rc": rc, "dir": tmp / "run", "seen": seen, "ids": _ids(tmp / "vocab" / "spm.model")}


def _check_prompt(tokens, ids):
    """`<eos> source </src> <2tgt> <2en> <dom_…>`: returns the pair."""
    tokens = [int(t) for t in tokens]
    sep = tokens.index(ids["sep"])
    pair = {v: k for k, v in ids["lang"].items()}[tokens[sep + 1]]
    assert tokens[0] == 1 and sep > 1
    assert tokens[sep + 2:sep + 4] == [ids["en"], ids["dom"][pair]]
    return pair


def _check_batch(batch, ids):
    """Every packed example carries the prefix and tags, unweighted; returns the pairs seen."""
    pairs = set()
    for row in range(batch["decoder_target_tokens"].shape[0]):
        seg = batch["decoder_segment_ids"][row]
        for s in sorted(set(seg[seg > 0].tolist())):
            tokens = batch["decoder_target_tokens"][row][seg == s]
            weights = batch["decoder_loss_weights"][row][seg == s]
            pairs.add(_check_prompt(tokens, ids))
            sep = tokens.tolist().index(ids["sep"])
            assert weights[:sep + 4].sum() == 0  # loss_on_tags off: the tags are prompt
    return pairs


def test_gin_bindings_reach_the_config_vocabulary_and_batches(gin_setup):
    inputs = gin_setup["config"].inputs
    assert inputs.source_language_tags and inputs.prefix_eos and not inputs.loss_on_tags
    assert inputs.domains == {"en-de": "news", "en-zh": "legal"}
    assert gin_setup["seen"]["vocabulary"] == {"separator": True, "domains": ["legal", "news"]}
    ids = gin_setup["ids"]
    assert _check_batch(gin_setup["batch"], ids) == {"en-de", "en-zh"}
    prompts = evaluation.decoder_prompts(gin_setup["eval_batch"], 12)
    assert {_check_prompt(p[p > 0], ids) for p in prompts} == {"en-zh"}


@pytest.mark.slow
def test_train_main_trains_and_decodes_with_the_tags(tagged_run):
    assert tagged_run["rc"] == 0
    run = json.loads((tagged_run["dir"] / "run.json").read_text())
    assert "InputConfig.prefix_eos = True" in run["gin_config"]
    assert tagged_run["seen"]["vocabulary"] == {"separator": True, "domains": ["legal", "news"]}
    ids = tagged_run["ids"]
    assert _check_batch(tagged_run["seen"]["train"][0], ids) == {"en-de", "en-zh"}
    prompts = [p for group in tagged_run["seen"]["prompts"] for p in group]
    decoded = {_check_prompt(p[p > 0], ids) for p in prompts if np.count_nonzero(p) > 1}
    assert decoded == {"en-de", "en-zh"}  # every pair decoded with its own forced tags


def test_encoder_decoder_refuses_the_options(gin_setup, tmp_path, capsys):
    rc = train_cli.main([*_argv(tmp_path / "ed", gin_setup["vocab"]),
                         "--gin.MODEL_SIZE='mini-1'", "--gin.InputConfig.prefix_eos=True"])
    err = capsys.readouterr().err
    assert rc == 2 and "InputConfig.prefix_eos applies to decoder-only sizes only" in err
    assert not os.path.exists(tmp_path / "ed" / "run.json")


def test_a_vocabulary_without_the_domain_tag_is_named(gin_setup, tmp_path, capsys):
    rc = train_cli.main(_argv(tmp_path / "fin", gin_setup["vocab"],
                              "--gin.InputConfig.domains={'en-de': 'news', 'en-zh': 'finance'}"))
    err = capsys.readouterr().err
    assert rc == 2 and "'<dom_finance>'" in err and str(gin_setup["vocab"]) in err
