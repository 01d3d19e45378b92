"""Zoo: names, config validation, `mnmt-zoo` CLI, gin files in sync, FLOPs accounting."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from mnmt.models import accounting, zoo
from mnmt.models.configs import T5Config

REPO = Path(__file__).resolve().parents[2]


def test_sizes_and_get_config():
    assert zoo.sizes("mini") == [f"mini-{i}" for i in range(1, 9)]
    assert zoo.sizes("fernandes")[0] == "fernandes-1"
    assert "ghorbani-6-6" in zoo.sizes("ghorbani") and "ghorbani-64-64" in zoo.sizes("ghorbani")
    c = zoo.get_config("mini-3", vocab_size=1000)
    assert c.vocab_size == 1000 and c.name == "mini-3" and c.family == "mini"
    assert c.num_heads * c.head_dim == c.emb_dim and c.mlp_dim == 4 * c.emb_dim
    g = zoo.get_config("ghorbani-12-4")
    assert (g.num_encoder_layers, g.num_decoder_layers, g.emb_dim, g.mlp_dim) == (12, 4, 1024, 8192)
    assert zoo.get_config("caillaut-1b").is_decoder_only
    assert zoo.get_config("mini-2", dropout_rate=0.1).dropout_rate == 0.1
    with pytest.raises(ValueError, match="mini-1 … mini-8"):
        zoo.get_config("mini-9")
    with pytest.raises(ValueError, match="families"):
        zoo.get_config("gpt-2")
    with pytest.raises(ValueError, match="unknown model family"):
        zoo.sizes("nope")


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="emb_dim must be a positive int"):
        T5Config(emb_dim=0)
    with pytest.raises(ValueError, match="dtype"):
        T5Config(dtype="float64")
    with pytest.raises(ValueError, match="mlp_activations"):
        T5Config(mlp_activations=("swishy",))
    with pytest.raises(ValueError, match="num_encoder_layers == 0"):
        T5Config(architecture="decoder_only")
    c = zoo.get_config("mini-1")
    assert T5Config.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    with pytest.raises(ValueError, match="unknown field"):
        T5Config.from_dict({"emb": 3})


def test_cli_json(capsys):
    assert zoo.main(["--family", "fernandes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == zoo.sizes("fernandes")
    for r in rows:
        assert r["total"] == r["embedding"] + r["non_embedding"]
        assert r["non_embedding"] == r["encoder"] + r["decoder"]
    assert rows[0]["total"] == 149_953_024 and rows[0]["non_embedding"] == 18_881_024
    assert zoo.main(["--family", "caillaut"]) == 0
    assert "caillaut-6.9b" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        zoo.main(["--size", "mini-42"])


@pytest.mark.parametrize("family", zoo.FAMILIES)
def test_cli_json_every_family(capsys, family):
    """`mnmt-zoo --family F --json`: one record per size with total, embedding, non_embedding,
    encoder and decoder, equal to `param_counts` of that size, and consistent with each other."""
    assert zoo.main(["--family", family, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == zoo.sizes(family) and rows
    for r in rows:
        c = zoo.get_config(r["name"])
        assert {k: r[k] for k in ("total", "embedding", "non_embedding", "encoder", "decoder")} \
            == accounting.param_counts(c).to_dict()
        assert r["total"] == r["embedding"] + r["non_embedding"] > 0
        assert r["non_embedding"] == r["encoder"] + r["decoder"]
        assert (r["encoder"] == 0) == c.is_decoder_only and r["decoder"] > 0
        assert (r["emb_dim"], r["num_heads"], r["head_dim"], r["mlp_dim"], r["vocab_size"]) == (
            c.emb_dim, c.num_heads, c.head_dim, c.mlp_dim, c.vocab_size)
    if family == "caillaut":   # Table 3 shapes and the padded 100,352 vocabulary
        assert [(r["num_decoder_layers"], r["emb_dim"], r["num_heads"]) for r in rows] == [
            (6, 512, 8), (12, 768, 16), (24, 1024, 16), (16, 1536, 16), (16, 2048, 8),
            (32, 4096, 32)]
        assert {r["vocab_size"] for r in rows} == {100_352}
    assert zoo.main(["--family", family, "--json", "--vocab_size", "1000"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert {r["vocab_size"] for r in small} == {1000}
    assert [r["non_embedding"] for r in small] == [r["non_embedding"] for r in rows]


def test_gin_files_in_sync():
    gin_dir = REPO / "t5x_configs" / "models"
    for size in zoo.GIN_SIZES:
        path = gin_dir / f"{size}.gin"
        assert path.read_text(encoding="utf-8") == zoo.gin_text(size), (
            f"{path} is stale: run `mnmt-zoo --write_gin t5x_configs/models`")


def test_flops_terms_scale_as_expected():
    c = zoo.get_config("mini-3")
    f1 = accounting.train_flops_per_example(c, 32, 32)
    f2 = accounting.train_flops_per_example(c, 64, 64)
    assert 2.0 < f2 / f1 < 4.0   # linear dense terms + quadratic attention terms
    terms = accounting.forward_flops_terms(c, 64, 64)
    hk = c.num_heads * c.head_dim
    assert terms["encoder_attention"] == 4 * 64 * 64 * hk * c.num_encoder_layers
    # without attention terms the count is 6 × (matmul weights) × tokens (Kaplan's 6N)
    dense = sum(v for k, v in terms.items() if "attention" not in k)
    pc = accounting.param_counts(c)
    norms_and_rel = (pc.non_embedding - c.num_encoder_layers * accounting.encoder_layer_params(c)
                     - c.num_decoder_layers * accounting.decoder_layer_params(c))
    assert norms_and_rel == 2 * c.emb_dim + 2 * 32 * c.num_heads
    with pytest.raises(ValueError, match="target_len"):
        accounting.train_flops_per_example(c, 8, 0)
    assert dense > 0


def test_flops_match_compiled_dot_count(benchmark_script):
    """The analytic count equals XLA's matmul FLOPs of the compiled training step within 3%
    (benchmarks/speed/flops_check.py reports the same for more sizes)."""
    r = benchmark_script("flops_check").check("mini-1", batch=2, input_len=16, target_len=12, vocab=64)
    assert abs(r["ratio_xla_dots_over_analytic"] - 1.0) < 0.03   # + relpos one-hot einsum
    assert 1.0 <= r["ratio_xla_over_analytic"] < 1.25
    assert np.isfinite(r["xla_train_flops"]) and jax.default_backend() == "cpu"


def test_ladder_is_one_shape_rule():
    """ladder-k: width 8·(k + 1), depth ceil(k / 2), 8-dimensional heads, MLP 4·width, for every
    size; ≥ 6 sizes spanning ≥ 30× in non-embedding parameters, each larger
    than the last; ladder-1 has micro-1's shape (a study may mix them)."""
    names = zoo.sizes("ladder")
    assert names == [f"ladder-{k}" for k in range(1, 9)]
    counts = []
    for k, name in enumerate(names, start=1):
        c = zoo.get_config(name)
        width = 8 * (k + 1)
        assert (c.emb_dim, c.head_dim, c.num_heads, c.mlp_dim) == (width, 8, width // 8, 4 * width)
        assert c.num_encoder_layers == c.num_decoder_layers == (k + 1) // 2
        assert 16 <= c.emb_dim / c.num_encoder_layers <= 24
        counts.append(accounting.param_counts(c).non_embedding)
    assert all(b > a for a, b in zip(counts[:-1], counts[1:], strict=True))
    assert counts[5] / counts[0] >= 30
    assert accounting.param_counts(zoo.get_config("ladder-1")).non_embedding == \
        accounting.param_counts(zoo.get_config("micro-1")).non_embedding
    with pytest.raises(ValueError, match="ladder-1 … ladder-8"):
        zoo.get_config("ladder-9")
