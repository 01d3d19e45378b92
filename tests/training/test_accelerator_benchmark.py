"""benchmarks/speed/accelerator_step.py: its JSON on CPU (a tiny size), the batch search, the peaks."""

import json

import pytest


@pytest.fixture
def bench(benchmark_script):
    return benchmark_script("accelerator_step")


def test_json_on_cpu_has_every_key_and_consistent_rates(bench, capsys):
    assert bench.main(["--json", "--steps", "1", "--warmup", "1", "--rows", "4"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(bench.RESULT_KEYS) <= set(r)
    assert r["platform"] == "cpu" and r["dtype"] == "float32"
    assert r["peak_source"] == "measured matmul" and r["peak_flops"] == r["measured_peak_flops"]
    ours = r["sizes"]["mini-1"]["ours"]
    assert set(bench.SIDE_KEYS) <= set(ours)
    assert ours["rows"] == 4 and ours["halvings"] == 0
    assert ours["tokens_per_step"] == 4 * (32 + 32)
    assert ours["tokens_per_s"] == pytest.approx(ours["tokens_per_step"] / ours["sec_per_step"])
    flops = bench.step_flops("mini-1", 512, 4, 32, 32)
    assert ours["mfu"] == pytest.approx(flops / ours["sec_per_step"] / r["peak_flops"])
    assert 0 < ours["mfu"] < 1
    hf = r["sizes"]["mini-1"]["hf"]
    if "skipped" in hf:  # torch / transformers absent (the [bench] extra)
        assert "pip install" in hf["skipped"]
    else:
        assert set(bench.SIDE_KEYS) <= set(hf) and hf["rows"] == 4
        speedup = r["sizes"]["mini-1"]["speedup"]
        assert speedup == pytest.approx(ours["tokens_per_s"] / hf["tokens_per_s"])


def test_batch_is_halved_on_out_of_memory_only(bench):
    def try_rows(rows):
        if rows > 250:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate")
        return {"rows_seen": rows}

    assert bench.halving_search(try_rows, 1953, 1) == (244, {"rows_seen": 244}, 3)
    with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
        bench.halving_search(try_rows, 1953, 300)  # would go below min_rows

    def broken(rows):
        raise ValueError("shapes do not match")

    with pytest.raises(ValueError, match="shapes"):
        bench.halving_search(broken, 64, 1)


def test_nominal_peak_by_device_kind(bench):
    assert bench.nominal_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert bench.nominal_peak("NVIDIA H100 PCIe") == 756e12
    assert bench.nominal_peak("NVIDIA H200") == 989e12
    assert bench.nominal_peak("TPU v4") == 275e12
    assert bench.nominal_peak("cpu") is None
