"""Partitioning: rules/mesh/shardings, and a 4×2 mesh on 8 simulated CPU devices reproducing the
single-device loss and gradients (run in a subprocess so XLA_FLAGS does not leak)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from mnmt.models import partitioning


def test_standard_rules_map_t5x_axes():
    rules = dict(partitioning.standard_logical_axis_rules())
    assert rules["batch"] == "data"
    assert rules["vocab"] == rules["mlp"] == rules["heads"] == "model"
    assert rules["embed"] is None and rules["kv"] is None
    assert dict(partitioning.standard_logical_axis_rules(parameter_partitioning_dims=2))[
        "embed"] == "data"
    custom = partitioning.standard_logical_axis_rules(additional_rules=[("mlp", None)])
    assert custom[0] == ("mlp", None)   # additional rules take precedence
    with pytest.raises(ValueError, match="additional_rules"):
        partitioning.standard_logical_axis_rules(additional_rules=[("mlp",)])


def test_logical_to_shardings_on_one_device():
    mesh = partitioning.make_mesh(1, 1)
    assert mesh.axis_names == ("data", "model")
    assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
    tree = {"w": P("embed", "mlp"), "e": P("vocab", "embed")}
    sh = partitioning.logical_to_shardings(tree, mesh, partitioning.standard_logical_axis_rules())
    assert sh["w"].spec == P(None, "model") and sh["e"].spec == P("model", None)
    with pytest.raises(ValueError, match="needs 16 devices"):
        partitioning.make_mesh(8, 2)


SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    from mnmt.models.test_utils import make_batch, tiny_config
    from mnmt.models import partitioning
    from mnmt.models.decoder_only import DecoderOnlyModel, format_pair, pack_examples
    from mnmt.models.encoder_decoder import EncoderDecoderModel
    assert jax.device_count() == 8, jax.devices()
    rules = partitioning.standard_logical_axis_rules()

    def compare(model, batch):
        params = jax.jit(model.init_params)(jax.random.PRNGKey(0), batch)

        def loss_and_grad(p, b):
            return jax.value_and_grad(lambda q: model.loss_fn(q, b, None, z_loss=1e-3)[0])(p)

        mesh1 = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
        with partitioning.activation_context(mesh1, rules):
            l1, g1 = jax.jit(loss_and_grad)(params, batch)
        mesh = partitioning.make_mesh(4, 2)
        p_sh = partitioning.logical_to_shardings(model.params_logical_axes(batch), mesh, rules)
        b_sh = partitioning.batch_sharding(mesh, batch, rules)
        sp = partitioning.shard_params(params, p_sh)
        sb = jax.device_put(batch, b_sh)
        with partitioning.activation_context(mesh, rules):
            step = jax.jit(loss_and_grad, in_shardings=(p_sh, b_sh), out_shardings=(None, p_sh))
            compiled = step.lower(sp, sb).compile()
            l8, g8 = compiled(sp, sb)
            hlo = compiled.as_text()
        emb = sp["token_embedder"] if "token_embedder" in sp else sp["decoder"]["token_embedder"]
        emb_sh = emb["embedding"].sharding.spec
        wi = g8["decoder"]["layers_0"]["mlp"]["wi_0"]
        g1, g8 = jax.device_get(g1), jax.device_get(g8)
        diffs = jax.tree_util.tree_leaves(jax.tree_util.tree_map(
            lambda a, b: float(np.max(np.abs(a - b)) / (np.max(np.abs(a)) + 1e-12)), g1, g8))
        return {{"l1": float(l1), "l8": float(l8), "max_rel_grad_diff": max(diffs),
                "emb_spec": str(emb_sh), "mlp_grad_spec": str(wi.sharding.spec),
                "ndev": len(wi.sharding.device_set),
                "collectives": any(op in hlo for op in ("all-reduce", "all-gather",
                                                         "reduce-scatter"))}}

    config = tiny_config(vocab_size=40, emb_dim=16, num_heads=4, head_dim=4, mlp_dim=32)
    batch = make_batch(np.random.default_rng(0), b=8, ilen=9, tlen=7, vocab=40)
    batch["encoder_segment_ids"] = np.ones_like(batch["encoder_input_tokens"])
    batch["decoder_segment_ids"] = np.ones_like(batch["decoder_target_tokens"])
    encdec = compare(EncoderDecoderModel(config), batch)

    # decoder-only (Caillaut): two packed pairs per row, loss on target tokens only
    rng = np.random.default_rng(1)
    pairs = [format_pair(rng.integers(6, 40, 3).tolist(), rng.integers(6, 40, 2).tolist(),
                         sep_id=3, tgt_lang_id=4, eos_id=1) for _ in range(16)]
    dbatch = pack_examples(pairs, 16)
    assert dbatch["decoder_target_tokens"].shape[0] == 8, dbatch["decoder_target_tokens"].shape
    dconfig = config.replace(architecture="decoder_only", num_encoder_layers=0)
    deconly = compare(DecoderOnlyModel(dconfig), dbatch)
    print(json.dumps({{"encoder_decoder": encdec, "decoder_only": deconly}}))
""")


def test_4x2_mesh_matches_single_device(tmp_path):
    script = tmp_path / "mesh_check.py"
    script.write_text(SCRIPT.format())  # {{ }} in SCRIPT are literal braces
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    out_all = json.loads(out.stdout.strip().splitlines()[-1])
    for arch in ("encoder_decoder", "decoder_only"):
        res = out_all[arch]
        np.testing.assert_allclose(res["l8"], res["l1"], rtol=1e-5, err_msg=arch)
        assert res["max_rel_grad_diff"] < 1e-4, arch
        assert "model" in res["emb_spec"], arch        # vocab axis of the embedding over 'model'
        assert "model" in res["mlp_grad_spec"], arch   # gradients come back sharded like params
        assert res["ndev"] == 8, arch
        assert res["collectives"], arch                # the step really is partitioned
