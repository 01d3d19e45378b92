"""`mnmt-study` command-line errors: one line, exit status 2, nothing already written lost."""

import json

import pytest

from mnmt.study import cli as study
from mnmt.study import stages
from mnmt.study.loading import preset
from mnmt.study.spec import PRESETS


def run_cli(args, capsys):
    code = study.main(args)
    captured = capsys.readouterr()
    return code, captured.err


def test_unknown_preset_is_a_one_line_error(capsys, tmp_path):
    code, err = run_cli(["run", "--preset", "nope", "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    assert err.strip().count("\n") == 0 and "unknown preset 'nope'" in err
    assert not (tmp_path / "o").exists()


def test_missing_study_file(capsys, tmp_path):
    code, err = run_cli(["run", str(tmp_path / "missing.gin"), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "study file not found" in err


def test_study_file_with_unknown_binding_names_the_file(capsys, tmp_path):
    bad = tmp_path / "bad.gin"
    bad.write_text("StudySpec.no_such_field = 3\n")
    code, err = run_cli(["plan", str(bad)], capsys)
    assert code == 2 and str(bad) in err and err.strip().count("\n") == 0


def test_study_file_values_reach_the_plan(capsys, tmp_path):
    good = tmp_path / "s.gin"
    good.write_text("StudySpec.name = 'tiny'\nStudySpec.sizes = ['mini-1']\nStudySpec.weights = [0.1, 0.9]\n")
    assert study.main(["plan", str(good)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["mini-1_p0.10_s0", "mini-1_p0.90_s0"]


def test_unwritable_output_directory(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    code, err = run_cli(["run", "--preset", "ci", "--out", str(blocker)], capsys)
    assert code == 2 and "not a directory" in err
    assert blocker.read_text() == "keep me"


def test_output_directory_of_another_study_is_refused_and_kept(capsys, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    record = out / stages.STUDY_FILE
    other = {"name": "someone-else", "train_steps": 5}
    record.write_text(json.dumps(other))
    code, err = run_cli(["run", "--preset", "ci", "--out", str(out)], capsys)
    assert code == 2 and "holds a different study" in err and "name" in err
    assert json.loads(record.read_text()) == other


def test_a_record_written_before_a_field_existed_is_the_same_study(tmp_path):
    spec = PRESETS["ci"]
    older = stages.spec_json(spec)
    del older["batch_tokens"], older["train_steps_by_size"]  # fields added on 2026-11-23
    (tmp_path / stages.STUDY_FILE).write_text(json.dumps(older))
    stages.prepare_out_dir(tmp_path, spec)  # accepted, record left as it was
    assert json.loads((tmp_path / stages.STUDY_FILE).read_text()) == older
    changed = json.loads(json.dumps(older))
    changed["train_steps"] += 1
    (tmp_path / stages.STUDY_FILE).write_text(json.dumps(changed))
    with pytest.raises(stages.UsageError, match="train_steps"):
        stages.prepare_out_dir(tmp_path, spec)


@pytest.mark.parametrize("content,message", [
    (b'{"name": "cpu-ci", ', "not valid JSON"), (b"\xff\xfe{}", "not valid JSON"),
    (b"[1, 2]", "expected a JSON object"), (b'"cpu-ci"', "expected a JSON object"),
])
def test_a_damaged_study_record_is_one_line_and_left_alone(tmp_path, content, message):
    spec = PRESETS["ci"]
    (tmp_path / stages.STUDY_FILE).write_bytes(content)
    with pytest.raises(stages.UsageError, match=message) as err:
        stages.prepare_out_dir(tmp_path, spec)
    assert str(tmp_path / stages.STUDY_FILE) in str(err.value) and "\n" not in str(err.value)
    assert (tmp_path / stages.STUDY_FILE).read_bytes() == content  # nothing overwritten


@pytest.mark.parametrize("binding", ["StudySpec.nope=1", "train_steps", "StudySpec.train_steps=-3"])
def test_bad_preset_overrides(capsys, binding):
    code, err = run_cli(["plan", "--preset", "ci", f"--gin.{binding}"], capsys)
    assert code == 2 and err.startswith("mnmt-study: error:")


def test_the_default_preset_is_the_shipped_default_study_file():
    """The main job is defined once, as cpu_default.gin: `mnmt-study run` without a study,
    `--preset default` and the file itself are one study."""
    path = stages.repo_root() / "t5x_configs" / "studies" / "cpu_default.gin"
    assert "default" not in PRESETS
    from_gin = stages.load_spec(str(path), None, [])
    assert stages.load_spec(None, None, []) == preset("default") == from_gin
    assert from_gin.sizes == ("micro-1", "micro-2", "micro-3", "mini-1")


@pytest.mark.parametrize("fraction", ["0", "-0.2", "1.5"])
def test_a_stop_fraction_outside_its_share_is_a_one_line_error_before_any_run(
        fraction, capsys, tmp_path):
    """`StudySpec.stop_fraction` 0, negative or above 1 (1 is no early stop): exit status 2,
    one line naming the field, no output directory written."""
    out = tmp_path / "o"
    code, err = run_cli(["run", "--out", str(out), "--gin",
                         f"StudySpec.stop_fraction={fraction}"], capsys)
    assert code == 2 and err.strip().count("\n") == 0
    assert "StudySpec.stop_fraction: expected a share in (0, 1]" in err
    assert not out.exists()
