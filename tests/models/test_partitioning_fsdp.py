"""The parameter-sharded ("fsdp") logical-axis rules: which mesh axis each logical axis takes,
no array with two dims on one mesh axis, parameters split over 'data' on a simulated 4-device
mesh (data=4 model=1, data=2 model=2; a subprocess so XLA_FLAGS does not leak) with the same
training losses as the standard rules, and `TrainConfig.partitioning_rules` from gin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import gin
import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from mnmt.models import partitioning
from mnmt.models.configs import PARTITIONING_RULES
from mnmt.models.decoder_only import DecoderOnlyModel
from mnmt.models.encoder_decoder import EncoderDecoderModel
from mnmt.models.test_utils import make_batch, tiny_config
from mnmt.training.config import EvalConfig, InputConfig, TrainConfig
from mnmt.training.run_setup import build_run_json, build_setup, logical_rules, model_config_for


def _leaves(tree) -> list[tuple[str, P]]:
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, P))[0]
    return [(jax.tree_util.keystr(path), spec) for path, spec in flat]


def test_fsdp_rules_add_embed_over_data_and_keep_the_standard_model_axes():
    standard = dict(partitioning.standard_logical_axis_rules())
    fsdp = dict(partitioning.fsdp_logical_axis_rules())
    assert fsdp["embed"] == "data" and fsdp["batch"] == "data"
    assert {k: v for k, v in fsdp.items() if k != "embed"} == \
           {k: v for k, v in standard.items() if k != "embed"}
    names = [name for name, _ in partitioning.fsdp_logical_axis_rules()]
    assert names.index("batch") < names.index("embed")  # what keeps activations on batch
    assert partitioning.named_logical_axis_rules("fsdp") == partitioning.fsdp_logical_axis_rules()
    assert PARTITIONING_RULES == ("standard", "fsdp")
    with pytest.raises(ValueError, match="partitioning_rules must be one of"):
        partitioning.named_logical_axis_rules("zero3")


@pytest.mark.parametrize("model_cls,arch", [(EncoderDecoderModel, "encoder_decoder"),
                                            (DecoderOnlyModel, "decoder_only")])
def test_no_parameter_or_activation_puts_two_dims_on_one_mesh_axis(model_cls, arch):
    rules = partitioning.fsdp_logical_axis_rules()
    config = tiny_config(vocab_size=40, emb_dim=16, num_heads=4, head_dim=4, mlp_dim=32,
                         architecture=arch,
                         num_encoder_layers=1 if arch == "encoder_decoder" else 0)
    batch = make_batch(np.random.default_rng(0), b=4, ilen=6, tlen=5, vocab=40)
    axes = model_cls(config).params_logical_axes(batch)
    mesh_axes = _leaves(partitioning.logical_to_mesh_axes(axes, rules))
    assert mesh_axes
    replicated_over_data = []
    for path, spec in mesh_axes:
        used = [a for a in spec if a is not None]
        assert len(used) == len(set(used)), (path, spec)
        if "data" not in used:
            replicated_over_data.append(path)
    # every parameter but the relative-position tables ('heads', 'relpos_buckets') has 'embed'
    assert replicated_over_data and all("rel_embedding" in p for p in replicated_over_data)
    # activations annotated with 'embed' keep 'batch' on 'data' and leave 'embed' replicated
    for logical in (("batch", "length", "embed"), ("batch", "length", "mlp"),
                    ("batch", "heads", "length", "kv"), ("batch", "length", "vocab")):
        spec = partitioning.logical_to_mesh_axes(P(*logical), rules)
        assert spec[0] == "data" and "data" not in tuple(spec)[1:], (logical, spec)


SCRIPT = textwrap.dedent("""
    import json, math, sys
    import jax, numpy as np
    from mnmt.models import partitioning
    from mnmt.models.encoder_decoder import EncoderDecoderModel
    from mnmt.models.test_utils import make_batch, tiny_config
    from mnmt.training.optimizer import make_optimizer, rsqrt_schedule
    from mnmt.training.step_functions import build_step_functions
    assert jax.device_count() == 4, jax.devices()
    data, model_axis = int(sys.argv[1]), int(sys.argv[2])
    config = tiny_config(vocab_size=40, emb_dim=16, num_heads=4, head_dim=4, mlp_dim=32)
    batch = make_batch(np.random.default_rng(0), b=8, ilen=9, tlen=7, vocab=40)
    batch["encoder_segment_ids"] = np.ones_like(batch["encoder_input_tokens"])
    batch["decoder_segment_ids"] = np.ones_like(batch["decoder_target_tokens"])
    model = EncoderDecoderModel(config)
    mesh = partitioning.make_mesh(data, model_axis)

    def frac(leaf):
        shard = leaf.sharding.shard_shape(leaf.shape)
        return math.prod(shard) / math.prod(leaf.shape)

    out = {}
    for name in ("standard", "fsdp"):
        rules = partitioning.named_logical_axis_rules(name)

        def shardings(_abstract, rules=rules):
            axes = model.params_logical_axes({k: v[:1] for k, v in batch.items()})
            return partitioning.logical_to_shardings(axes, mesh, rules)

        schedule = rsqrt_schedule(1.0, 100)
        fns = build_step_functions(
            model, make_optimizer(schedule), schedule, mesh, shardings, batch,
            label_smoothing=0.0, z_loss=1e-4)
        losses = []
        with partitioning.activation_context(mesh, rules):  # as the trainer traces its step
            state = fns.init(jax.random.PRNGKey(0))
            sb = jax.device_put(batch, fns.batch_sharding)
            hlo = fns.step.lower(state, sb).compile().as_text()
            for _ in range(3):
                state, metrics = fns.step(state, sb)
                losses.append(float(metrics["loss"]))
        params = jax.tree_util.tree_flatten_with_path(fns.abstract_state["params"])[0]
        opt = jax.tree.leaves(fns.abstract_state["opt_state"])
        out[name] = {
            "losses": losses,
            "frac": {jax.tree_util.keystr(p): frac(leaf) for p, leaf in params},
            "data_specs": {jax.tree_util.keystr(p): "data" in str(leaf.sharding.spec)
                           for p, leaf in params},
            "opt_bytes": sum(frac(leaf) * leaf.size * leaf.dtype.itemsize for leaf in opt),
            "all_gather": "all-gather" in hlo,
        }
    print(json.dumps(out))
""")


@pytest.mark.parametrize("data,model_axis", [pytest.param(4, 1, marks=pytest.mark.slow), (2, 2)])
def test_fsdp_splits_parameters_over_data_and_trains_like_standard(tmp_path, data, model_axis):
    script = tmp_path / "fsdp_check.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run([sys.executable, str(script), str(data), str(model_axis)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(done.stdout.strip().splitlines()[-1])
    std, fsdp = res["standard"], res["fsdp"]
    # (a) standard: no parameter touches 'data'; fsdp: all but the relative-position tables do,
    # and each of those holds 1/data of what it holds under standard (model sharding unchanged)
    assert not any(std["data_specs"].values())
    replicated = sorted(p for p, on_data in fsdp["data_specs"].items() if not on_data)
    assert replicated == ["['decoder']['relpos_bias']['rel_embedding']",
                          "['encoder']['relpos_bias']['rel_embedding']"]
    for path, f in fsdp["frac"].items():
        expected = std["frac"][path] if path in replicated else std["frac"][path] / data
        assert f == pytest.approx(expected), path
    assert fsdp["opt_bytes"] < 0.6 * std["opt_bytes"]  # parameter-shaped slots follow
    assert fsdp["all_gather"]  # parameters are gathered for the step
    # (b) the same losses from the same seed (float32)
    np.testing.assert_allclose(fsdp["losses"], std["losses"], rtol=1e-5)
    assert std["losses"][0] != std["losses"][-1]  # the steps really train


def _config(tmp_path, **overrides) -> TrainConfig:
    """A config that needs no data: any existing file stands in for the vocabulary."""
    return TrainConfig(
        model_dir=str(tmp_path / "run"), model_size="mini-1", vocabulary_path=__file__,
        train_steps=4,
        inputs=InputConfig(mixture_or_task_name="unused",
                           feature_lengths={"inputs": 8, "targets": 8}, batch_size=2),
        eval=EvalConfig(tasks={"en-de": "unused"}), mixture_weights={"en-de": 1.0},
        **overrides)


def test_a_bad_gin_partitioning_rules_is_a_one_line_error(tmp_path):
    try:
        gin.parse_config("TrainConfig.partitioning_rules = 'zero3'")
        config = _config(tmp_path)
        assert config.partitioning_rules == "zero3"
        with pytest.raises(ValueError) as err:
            build_setup(config)
    finally:
        gin.clear_config()
    assert str(err.value) == ("invalid TrainConfig: partitioning_rules must be one of "
                              "('standard', 'fsdp'), got 'zero3'")
    assert not os.path.exists(tmp_path / "run"), "nothing may be written for a bad config"
    with pytest.raises(ValueError, match="partitioning_rules"):
        logical_rules(_config(tmp_path, partitioning_rules="zero3"))


def test_partitioning_rules_select_the_rules_and_reach_run_json(tmp_path):
    assert logical_rules(_config(tmp_path)) == tuple(partitioning.standard_logical_axis_rules())
    fsdp = _config(tmp_path, partitioning_rules="fsdp")
    assert logical_rules(fsdp) == tuple(partitioning.fsdp_logical_axis_rules())
    run_json = build_run_json(fsdp, "run", model_config_for(fsdp, 512), 512, 2)
    assert run_json["training"]["partitioning_rules"] == "fsdp"
    custom = tuple(partitioning.standard_logical_axis_rules(additional_rules=[("mlp", None)]))
    assert logical_rules(_config(tmp_path, logical_axis_rules=custom)) == custom
    with pytest.raises(ValueError, match="partitioning_rules must be 'standard' when "
                                         "logical_axis_rules"):
        logical_rules(_config(tmp_path, partitioning_rules="fsdp", logical_axis_rules=custom))
