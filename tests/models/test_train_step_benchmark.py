"""benchmarks/speed/train_step.py: its list of the step's matmuls agrees with the FLOP accounting."""

import numpy as np
import pytest

from mnmt.models import accounting
from mnmt.models.configs import T5Config


@pytest.fixture
def bench(benchmark_script):
    return benchmark_script("train_step")


@pytest.mark.parametrize("batch,src,tgt", [(32, 64, 64), (4, 48, 20)])
def test_matmul_list_flops_equal_the_accounting(bench, batch, src, tgt):
    ref = bench.REF
    config = T5Config(vocab_size=ref["vocab"], emb_dim=ref["d_model"], num_heads=ref["heads"],
                      head_dim=ref["head_dim"], mlp_dim=ref["d_ff"],
                      num_encoder_layers=ref["layers"], num_decoder_layers=ref["layers"],
                      dropout_rate=0.0, dtype="float32", logits_via_embedding=False)
    listed = sum(bench._matmul_flops(*m) for m in bench.step_matmuls(batch, src, tgt))
    assert listed == pytest.approx(
        accounting.train_flops_per_example(config, src, tgt) * batch, rel=1e-12)


@pytest.mark.parametrize("form", ["nn", "nt", "tn", "bnn", "bnt", "btn"])
def test_each_product_form_computes_what_its_shapes_say(bench, form):
    rng = np.random.default_rng(0)
    lhs_shape, rhs_shape = {"nn": ((5, 3), (3, 4)), "nt": ((5, 3), (4, 3)),
                            "tn": ((3, 5), (3, 4)), "bnn": ((2, 5, 3), (2, 3, 4)),
                            "bnt": ((2, 5, 3), (2, 4, 3)), "btn": ((2, 3, 5), (2, 3, 4))}[form]
    a, b = rng.standard_normal(lhs_shape), rng.standard_normal(rhs_shape)
    spec = {"nn": "mk,kn->mn", "nt": "mk,nk->mn", "tn": "km,kn->mn"}[form[-2:]]
    if form.startswith("b"):
        spec = ",".join("b" + s for s in spec.split("->")[0].split(",")) + "->b" + spec[-2:]
    expected = np.einsum(spec, a, b)
    np.testing.assert_allclose(bench._matmul(form, a, b), expected, rtol=1e-12)
    assert bench._matmul_flops(form, a.shape, b.shape) == 2 * expected.size * (
        a.shape[-1] if form[-2:] in ("nn", "nt") else a.shape[-2])
