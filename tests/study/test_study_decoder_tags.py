"""Caillaut's decoder-only format options (`InputConfig.source_language_tags`, `.domains`,
`.prefix_eos`, …) bound in a study file or with `mnmt-study --gin` reach every run's
InputConfig (through `StudySpec.train_overrides`), and are refused for encoder-decoder sizes
when the run is set up, naming the field."""

from __future__ import annotations

import pytest

from mnmt.data.decoder_format import DecoderOptions
from mnmt.study import stages
from mnmt.study.test_utils import run_configs, write_study_file


def _study(tmp_path, *lines) -> str:
    return write_study_file(tmp_path, *lines, name="dectags", sizes=("mini-dec-1",))


def test_study_file_and_gin_bindings_reach_every_runs_input_config(tmp_path):
    path = _study(tmp_path, "InputConfig.source_language_tags = True",
                  "InputConfig.domains = {'en-de': 'news', 'en-zh': 'legal'}")
    spec = stages.load_spec(path, None, ["InputConfig.prefix_eos=True"])
    configs = run_configs(spec)
    assert configs and all(
        DecoderOptions.of(c.inputs) == DecoderOptions(
            source_language_tags=True, domains=(("en-de", "news"), ("en-zh", "legal")),
            prefix_eos=True) for c in configs)
    # --gin overrides the file; without bindings the runs keep the plain format
    spec = stages.load_spec(path, None, ["InputConfig.source_language_tags=False"])
    assert {c.inputs.source_language_tags for c in run_configs(spec)} == {False}
    plain = stages.load_spec(_study(tmp_path), None, [])
    assert {DecoderOptions.of(c.inputs).changed_fields() == [] for c in run_configs(plain)} == {True}


def test_an_encoder_decoder_study_run_with_an_option_is_refused_naming_it():
    from mnmt.training import run_setup

    spec = stages.load_spec(None, "ci", ["InputConfig.loss_on_tags=True"])
    config = run_configs(spec)[0]
    with pytest.raises(ValueError, match="InputConfig.loss_on_tags applies to decoder-only"):
        run_setup.decoder_options_for(config, run_setup.model_config_for(config, 512))


def test_the_study_vocabulary_is_trained_with_its_domain_tags(tmp_path, monkeypatch):
    from mnmt.data import vocab

    asked = {}

    def record(*args, **kwargs):  # stands in for SentencePiece training: what the stage asks
        asked.update(kwargs)
        raise RuntimeError("stop after the vocabulary request")

    monkeypatch.setattr(vocab, "train_vocabulary", record)
    path = _study(tmp_path, "InputConfig.domains = {'en-de': 'news', 'en-zh': 'legal'}")
    spec = stages.load_spec(path, None, [])
    with pytest.raises(RuntimeError, match="stop after"):
        stages.prepare_data(spec, tmp_path, lambda line: None)
    assert asked["separator"] is True and asked["domains"] == ["legal", "news"]
    assert stages.study_domains(stages.load_spec(_study(tmp_path), None, [])) == []
