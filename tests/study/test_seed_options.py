"""Study options for robustness checks: the vocabulary's seed (`StudySpec.vocab_seed`) and grid
runs repeated with another seed (`StudySpec.seed_repeats`)."""

import pytest

from mnmt.study.spec import StudyError, StudySpec, expand


def test_seed_repeats_add_fitted_runs_of_another_seed():
    spec = StudySpec.of(sizes=("micro-1", "micro-2"), weights=(0.0, 0.5, 1.0),
                     heldout=(("mini-1", 0.3),), seed_repeats=(("micro-2", 0.5, 1),))
    runs = expand(spec)
    extra = [r for r in runs if r.seed == 1]
    assert [r.run_id for r in extra] == ["micro-2_p0.50_s1"]
    assert not extra[0].heldout and extra[0].weights == {"en-de": 0.5, "en-zh": 0.5}
    assert len(runs) == 2 * 3 + 1 + 1


@pytest.mark.parametrize("entry", [("mini-4", 0.5, 1), ("micro-1", 0.5, 0), ("micro-1", 0.5),
                                   ("micro-1", 1.5, 1), ("micro-1", 0.5, True)])
def test_bad_seed_repeats_name_the_field(entry):
    with pytest.raises(StudyError, match="StudySpec.seed_repeats"):
        StudySpec.of(sizes=("micro-1",), weights=(0.5,), seed_repeats=(entry,))


def test_the_vocabulary_is_trained_with_the_study_vocab_seed(monkeypatch, tmp_path):
    from mnmt.data import vocab
    from mnmt.study import stages

    seen = []

    class Stop(Exception):
        pass

    def fake(family, out_dir, size, **kw):
        seen.append(kw.get("seed", 0))
        raise Stop

    monkeypatch.setattr(vocab, "train_vocabulary", fake)
    for seed in (0, 7):
        spec = StudySpec.of(sizes=("micro-1",), weights=(0.5,), data_preset="cpu-tiny",
                         vocab_seed=seed)
        out = tmp_path / f"s{seed}"
        out.mkdir()
        with pytest.raises(Stop):
            stages.prepare_data(spec, out, lambda *a: None)
    assert seen == [0, 7]
