"""Training options in a study: `TrainConfig.F`, `DecodeConfig.F`, `OptimizerConfig.F`, … bound in
a study file or with `--gin` reach every run's TrainConfig (mnmt.study.train_options)."""

import json

import pytest

from mnmt.study import cli, stages
from mnmt.study.loading import preset
from mnmt.study.mesh_plan import spec_from_json
from mnmt.study.spec import PRESETS, StudyError, StudySpec, expand
from mnmt.study.spec_sections import field_value
from mnmt.study.test_utils import run_configs, write_study_file
from mnmt.training.config import EvalConfig, InputConfig, TrainConfig


def train_config(spec: StudySpec, index: int = 0) -> TrainConfig:
    """The TrainConfig of the study's `index`-th run (no data read, no mixture registered)."""
    return run_configs(spec)[index]


def plan(capsys, *args):
    code = cli.main(["plan", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_study(tmp_path, *lines) -> str:
    return write_study_file(tmp_path, *lines, name="opts")


def test_a_gin_training_option_on_a_preset_reaches_every_runs_config(capsys):
    spec = stages.load_spec(None, "ci", ["TrainConfig.label_smoothing=0.1"])
    assert spec.train_overrides == (("label_smoothing", 0.1),)
    assert {train_config(spec, i).label_smoothing for i in range(len(expand(spec)))} == {0.1}
    assert train_config(PRESETS["ci"]).label_smoothing == 0.0
    code, out, err = plan(capsys, "--preset", "ci", "--gin", "TrainConfig.label_smoothing=0.1",
                          "--gin.DecodeConfig.beam_size=8")
    assert code == 0 and len(out.splitlines()) == 4
    assert "# training options beyond the defaults: decode.beam_size=8, label_smoothing=0.1" in err
    code, out, _ = plan(capsys, "--preset", "ci", "--gin", "TrainConfig.label_smoothing=0.1",
                        "--json")
    listed = json.loads(out)
    assert code == 0 and listed["train_options"] == {"label_smoothing": 0.1}
    assert [r["run_id"] for r in listed["runs"]] == [r.run_id for r in expand(spec)]


def test_a_study_file_binds_decoding_and_the_optimizer(tmp_path):
    path = write_study(tmp_path, "DecodeConfig.beam_size = 8", "DecodeConfig.alpha = 1",
                       "OptimizerConfig.max_grad_norm = 1.0", "CheckpointConfig.keep = 5")
    spec = stages.load_spec(path, None, [])
    config = train_config(spec)
    assert (config.decode.beam_size, config.decode.alpha, config.checkpoint.keep) == (8, 1.0, 5)
    assert isinstance(config.decode.alpha, float)  # an int where a float is wanted: a float
    assert config.optimizer.max_grad_norm == 1.0  # optimizer None -> OptimizerConfig() first
    assert config.optimizer.decay_rate == 0.8 and config.optimizer.momentum is None
    # the study's own decode and checkpoint settings are kept beside them
    assert config.decode.num_examples == spec.evaluation.num_decode_examples
    assert config.checkpoint.period == spec.compute.checkpoint_every
    # --gin overrides the file's binding
    assert train_config(stages.load_spec(path, None, ["DecodeConfig.beam_size=2"])).decode \
        .beam_size == 2


def test_a_gin_macro_of_the_study_file_reaches_its_option(tmp_path):
    path = write_study(tmp_path, "SMOOTHING = 0.1", "TrainConfig.label_smoothing = %SMOOTHING")
    assert stages.load_spec(path, None, []).train_overrides == (("label_smoothing", 0.1),)
    assert stages.load_spec(path, None, ["SMOOTHING=0.2"]).train_overrides == \
        (("label_smoothing", 0.2),)


def test_a_launch_script_carries_the_options_to_every_host(tmp_path, capsys):
    """Each host's `run-one` loads the study from the same arguments, bindings included."""
    script = tmp_path / "launch.sh"
    assert cli.main(["launch", "--preset", "ci", "--gin", "TrainConfig.label_smoothing=0.1",
                     "--target", "slurm", "--script", str(script), "--out", "/shared/o"]) == 0
    assert "--gin.TrainConfig.label_smoothing=0.1" in script.read_text()
    capsys.readouterr()


@pytest.mark.parametrize(("binding", "field", "value"), [
    ("TrainConfig.learning_rate=0.5", "learning_rate", 0.5),
    ("TrainConfig.warmup_steps=20", "warmup_steps", 20),
    ("TrainConfig.train_steps=50", "train_steps", 50),
    ("EvalConfig.period=50", "eval_every", 50),
    ("EvalConfig.sets=['validation', 'test']", "eval_sets", ("validation", "test")),
    ("CheckpointConfig.period=25", "checkpoint_every", 25),
    ("DecodeConfig.at_end=False", "decode_at_end", False),
    ("DecodeConfig.num_examples=8", "num_decode_examples", 8),
    ("InputConfig.batch_size=16", "batch_size", 16),
    ("InputConfig.batch_tokens=None", "batch_tokens", 0),
    ("InputConfig.feature_lengths={'inputs': 24, 'targets': 28}", "feature_lengths",
     (("inputs", 24), ("targets", 28))),
    ("OptimizerConfig.momentum=0.9", "momentum", 0.9),
    ("BranchConfig.cooldown_fraction=0.2", "branch_cooldown_fraction", 0.2),
])
def test_an_option_the_study_owns_sets_its_studyspec_field(tmp_path, binding, field, value):
    for spec in (stages.load_spec(None, "ci", [binding]),
                 stages.load_spec(write_study(tmp_path, binding.replace("=", " = ", 1)), None, [])):
        assert field_value(spec, field) == value and spec.train_overrides == ()
    assert train_config(stages.load_spec(None, "ci", ["TrainConfig.learning_rate=0.5"])) \
        .learning_rate == 0.5


def test_an_option_given_both_ways_must_agree(tmp_path, capsys):
    with pytest.raises(stages.UsageError) as err:
        stages.load_spec(None, "ci", ["StudySpec.learning_rate=0.3", "TrainConfig.learning_rate=0.5"])
    assert "StudySpec.learning_rate = 0.3 and TrainConfig.learning_rate = 0.5" in str(err.value)
    path = write_study(tmp_path, "StudySpec.eval_every = 40", "EvalConfig.period = 50")
    code, _, err_text = plan(capsys, path)
    assert code == 2 and "StudySpec.eval_every = 40 and EvalConfig.period = 50" in err_text
    # the same value both ways is one setting; --gin overrides the file's StudySpec field
    path = write_study(tmp_path, "StudySpec.eval_every = 40", "EvalConfig.period = 40")
    assert stages.load_spec(path, None, ["EvalConfig.period=60"]).evaluation.eval_every == 60


@pytest.mark.parametrize(("binding", "expected"), [
    ("TrainConfig.model_dir='x'", "TrainConfig.model_dir: the study sets it per run"),
    ("TrainConfig.seed=3", "TrainConfig.seed: the study sets it per run; use StudySpec.seeds"),
    ("TrainConfig.model_size='mini-1'", "use StudySpec.sizes"),
    ("TrainConfig.mixture_weights={'en-de': 1.0}", "use StudySpec.weights"),
    ("InputConfig.mixture_or_task_name='m'", "InputConfig.mixture_or_task_name: the study sets"),
    ("InputConfig.cache_dirs=['c']", "use StudySpec.cache_dir"),
    ("EvalConfig.tasks={'en-de': 't'}", "use StudySpec.pairs and StudySpec.tasks"),
    ("BranchConfig.parent_step=3", "use StudySpec.cooldown_branches"),
    ("CheckpointConfig.keep_steps=[3]", "CheckpointConfig.keep_steps: the study sets it per run"),
    ("TrainConfig.cooldown_steps=30", "TrainConfig.cooldown_steps: use StudySpec.cooldown_fraction"),
    ("TrainConfig.decode=None", "bind the section's fields, DecodeConfig.FIELD = VALUE"),
])
def test_an_option_the_study_sets_per_run_is_refused_naming_what_to_use(capsys, binding,
                                                                          expected):
    code, out, err = plan(capsys, "--preset", "ci", "--gin", binding)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("mnmt-study: error: --gin") and expected in err, err


@pytest.mark.parametrize(("binding", "expected"), [
    ("TrainConfig.label_smothing=0.1", "did you mean TrainConfig.label_smoothing?"),
    ("TrainConfg.label_smoothing=0.1", "unknown configurable 'TrainConfg' (did you mean TrainConfig?)"),
    ("StudySpc.train_steps=1", "unknown configurable 'StudySpc' (did you mean StudySpec?)"),
    ("StudySpec.trainsteps=1", "did you mean StudySpec.train_steps?"),
    ("DecodeConfig.beamsize=8", "did you mean DecodeConfig.beam_size?"),
    ("StudySpec.beam_size=8", "StudySpec has no field 'beam_size' (did you mean DecodeConfig.beam_size?)"),
    ("TrainConfig.max_grad_norm=1.0", "did you mean OptimizerConfig.max_grad_norm?"),
])
def test_an_unknown_name_gets_the_closest_one(tmp_path, capsys, binding, expected):
    path = write_study(tmp_path)
    for study in (["--preset", "ci", "--gin", binding], [path, "--gin", binding]):
        code, _, err = plan(capsys, *study)
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
    in_file = write_study(tmp_path, binding.replace("=", " = ", 1))
    code, _, err = plan(capsys, in_file)
    assert code == 2 and expected in err and "line 4" in err, err


@pytest.mark.parametrize(("binding", "expected"), [
    ("TrainConfig.label_smoothing='a'", "TrainConfig.label_smoothing: expected a number, got 'a'"),
    ("DecodeConfig.beam_size=2.5", "DecodeConfig.beam_size: expected an integer, got 2.5"),
    ("DecodeConfig.steps=[10, 'x']", "DecodeConfig.steps: expected a tuple of integers"),
    ("TrainConfig.tensorboard=1", "TrainConfig.tensorboard: expected True or False, got 1"),
    ("OptimizerConfig.max_grad_norm='big'", "OptimizerConfig.max_grad_norm: expected a number or None"),
])
def test_a_value_of_the_wrong_type_names_the_binding(tmp_path, binding, expected):
    with pytest.raises(stages.UsageError, match="^--gin: " + expected.replace("(", r"\(")
                       .replace(")", r"\)")):
        stages.load_spec(None, "ci", [binding])
    with pytest.raises(stages.UsageError, match="study.gin: " + expected.replace("(", r"\(")
                       .replace(")", r"\)")):
        stages.load_spec(write_study(tmp_path, binding.replace("=", " = ", 1)), None, [])


def test_train_overrides_are_validated_when_given_directly():
    assert StudySpec.of(train_overrides=(("decode.steps", [10, 20]),)).train_overrides
    for overrides, message in (
        ((("learning_rate", 0.5),), "'learning_rate' is StudySpec.learning_rate"),
        ((("decode.beamsize", 8),), "not a TrainConfig path (did you mean 'decode.beam_size'?)"),
        ((("seed", 3),), "TrainConfig.seed: the study sets it per run"),
        ((("z_loss", "x"),), "TrainConfig.z_loss: expected a number"),
        (("z_loss",), "expected (TrainConfig path, value) pairs"),
    ):
        with pytest.raises(StudyError, match="^StudySpec.train_overrides: ") as err:
            StudySpec.of(train_overrides=overrides)
        assert message in str(err.value)


def test_the_overrides_travel_with_the_study(tmp_path, capsys):
    """To worker processes (dataclasses.asdict), the mesh planner's child (JSON), the study
    record; a study record with other options is another study."""
    spec = stages.load_spec(None, "ci", ["DecodeConfig.steps=[100, 200]", "TrainConfig.z_loss=0",
                                         "OptimizerConfig.max_grad_norm=1.0"])
    assert spec.train_overrides == (("decode.steps", (100, 200)), ("optimizer.max_grad_norm", 1.0),
                                    ("z_loss", 0.0))
    assert StudySpec.of(**spec.flat_fields()) == spec  # mnmt.study.workers
    assert spec_from_json(stages.spec_json(spec)) == spec  # mnmt.study.mesh_plan
    assert train_config(spec_from_json(stages.spec_json(spec))) == train_config(spec)
    stages.prepare_out_dir(tmp_path, spec, command="plan")
    other = stages.load_spec(None, "ci", ["TrainConfig.z_loss=0.001"])
    with pytest.raises(stages.UsageError, match=r"fields differ: train_overrides"):
        stages.prepare_out_dir(tmp_path, other, command="plan")


# The ci preset's first run as make_train_config built it before studies took training options
# (fields added to TrainConfig since then must keep their defaults).
CI_RUN_BEFORE = json.loads("""{"activation_dtype": "float32", "branches": {"cooldown_fraction":
null, "parent_dir": "", "parent_step": 0, "points": []}, "checkpoint": {"keep": 2, "keep_steps": [],
"period": 100}, "cooldown_shape": "linear", "cooldown_steps": 0, "decay": "rsqrt", "decode":
{"alpha": 0.6, "at_end": true, "beam_size": 4, "max_length": null, "num_examples": 16, "steps":
[]}, "dropout_rate": 0.0, "eval": {"batch_size": 64, "cache_batches": true, "period": 100, "sets":
["validation"], "tasks": {"en-de": "t_en-de", "en-zh": "t_en-zh"}}, "extra": {"data_preset":
"cpu-tiny", "heldout": false, "irreducible_loss": {}, "mixture": ""},
"gradient_accumulation_steps": 1, "inputs": {"batch_size": 32, "batch_tokens": null,
"cache_dirs": [], "feature_lengths": {"inputs": 32, "targets": 32}, "mixture_or_task_name": "mix",
"prefetch": 2, "shards": null}, "label_smoothing": 0.0, "learning_rate": 1.0, "log_every": 10,
"logical_axis_rules": null, "mesh_shape": [-1, 1], "mixture_caps": {"en-de": null, "en-zh": null},
"mixture_weights": {"en-de": 0.5, "en-zh": 0.5}, "model_dir": "/r/micro-1_p0.50_s0", "model_size":
"micro-1", "optimizer": null, "partitioning_rules": "standard", "peak_flops": null, "remat_policy":
"none", "run_id": "micro-1_p0.50_s0", "seed": 0, "study": "cpu-ci", "tensorboard": true,
"train_steps": 300, "vocabulary_path": "v.model", "warmup": "linear", "warmup_steps": 50,
"z_loss": 0.0001}""")


def _differences(got: dict, before: dict, defaults: dict, where: str = "") -> list[str]:
    out = []
    for key, value in got.items():
        if isinstance(value, dict) and isinstance(before.get(key), dict) and key != "extra":
            out += _differences(value, before[key], defaults.get(key) or {}, f"{where}{key}.")
        elif key in before and value != before[key]:
            out.append(f"{where}{key}: {value!r} != {before[key]!r}")
        elif key not in before and value != defaults.get(key):
            out.append(f"{where}{key}: {value!r} is not the default {defaults.get(key)!r}")
    return out


def test_a_study_without_training_options_gives_the_same_train_config_as_before():
    got = json.loads(json.dumps(train_config(stages.load_spec(None, "ci", [])).to_dict()))
    defaults = json.loads(json.dumps(TrainConfig(
        model_dir="", model_size="", vocabulary_path="", train_steps=1,
        inputs=InputConfig(mixture_or_task_name="", feature_lengths={}, batch_size=1),
        eval=EvalConfig(tasks={})).to_dict()))
    assert _differences(got, CI_RUN_BEFORE, defaults) == []
    shipped = stages.load_spec(None, "cpu-default", [])  # the study file, through gin
    assert shipped.train_overrides == () and train_config(shipped) == train_config(preset("default"))


@pytest.mark.slow  # trains 4 steps of micro-1 (vocabulary, compilation): 1-3 min on 2 cores
def test_an_override_reaches_the_trained_runs_run_json(tmp_path):
    out = tmp_path / "study"
    gin = ["--gin", 'StudySpec.sizes=("micro-1",)', "--gin", "StudySpec.train_steps=4",
           "--gin", "StudySpec.eval_every=4", "--gin", "StudySpec.checkpoint_every=4",
           "--gin", "StudySpec.warmup_steps=2", "--gin", "DecodeConfig.at_end=False",
           "--gin", "TrainConfig.label_smoothing=0.1", "--gin", "TrainConfig.z_loss=0"]
    run_id = expand(stages.load_spec(None, "ci", gin[1::2]))[0].run_id
    assert cli.main(["run-one", "--preset", "ci", *gin, "--out", str(out), "--run", run_id]) == 0
    record = json.loads((out / "runs" / run_id / "run.json").read_text())
    assert record["status"] == "finished"
    assert (record["training"]["label_smoothing"], record["training"]["z_loss"]) == (0.1, 0.0)
    assert record["training"]["steps"] == 4
