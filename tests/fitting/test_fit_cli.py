import json

import pytest
from synth import make_final_table

from fitting.cli import main


@pytest.fixture(scope="module")
def tidy(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "tidy.csv"
    make_final_table(sizes=[1e5, 3e5, 1e6, 3e6, 1e7], weights=(0.0, 0.1, 0.3, 0.5, 0.7, 1.0),
                     noise=0.005, seed=4).to_csv(p, index=False)
    return str(p)


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_fit_power_with_column_mapping(tmp_path, capsys):
    import numpy as np
    import pandas as pd

    n = np.geomspace(1e5, 1e8, 6)
    pd.DataFrame({"params": n, "val_loss": 20 * n**-0.3 + 1.1}).to_csv(tmp_path / "u.csv",
                                                                     index=False)
    rc = main(["fit", "--law", "power", "--input", str(tmp_path / "u.csv"),
               "--columns", "n=params,loss=val_loss", "--uncertainty", "none", "--json"])
    assert rc == 0
    d = _json(capsys)
    assert d["law"] == "power" and abs(d["params"]["l_inf"] - 1.1) < 1e-4


def test_fit_joint_and_multilingual_roundtrip(tidy, tmp_path, capsys):
    assert main(["fit", "--law", "joint", "--input", tidy, "--n-refits", "5", "--json"]) == 0
    d = _json(capsys)
    assert d["law"] == "joint" and abs(d["params"]["l_inf[en-zh]"] - 1.5) < 0.05
    out = tmp_path / "ml.json"
    assert main(["fit", "--law", "multilingual", "--form", "eq13", "--input", tidy,
                 "--n-refits", "5", "--out", str(out)]) == 0
    assert "alpha[en-de]" in capsys.readouterr().out
    assert main(["recommend", "--fit", str(out), "--n", "1e9", "--preferences",
                 "en-de=3,en-zh=1"]) == 0
    rec = _json(capsys)[0]
    assert rec["weights"]["en-de"] > 0.5
    png = tmp_path / "f.png"
    assert main(["frontier", "--fit", str(out), "--sizes", "1e8,1e9", "--plot", str(png),
                 "--json"]) == 0
    fr = _json(capsys)
    assert set(fr["values"]) == {"1e+08", "1e+09"} and png.exists()


def test_power_groups_per_pair_and_weight(tidy, capsys):
    assert main(["fit", "--law", "power", "--input", tidy, "--uncertainty", "none",
                 "--json"]) == 0
    d = _json(capsys)
    assert "pair=en-de,weight=0.5" in d and "pair=en-de,weight=0.0" not in d


def test_bad_input_exit_code_and_message(tmp_path, capsys):
    df = make_final_table(sizes=[1e5, 1e6, 1e7], weights=(1.0,))
    df.loc[2, "value"] = -1.0
    p = tmp_path / "bad.csv"
    df.to_csv(p, index=False)
    assert main(["fit", "--law", "joint", "--input", str(p)]) == 2
    err = capsys.readouterr().err
    assert "'value'" in err and "row 2" in err
    assert main(["fit", "--law", "joint", "--input", str(p), "--drop-invalid",
                 "--uncertainty", "none", "--json"]) == 2  # 2 sizes left for en-zh: too few
    assert "need" in capsys.readouterr().err
    assert main(["fit", "--law", "bivariate", "--input", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_report_command(tidy, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", "--input", tidy, "--out", str(out), "--ground-truth",
                 "en-de=1.0,en-zh=1.5", "--n-refits", "5"]) == 0
    assert (out / "report.md").exists() and (out / "fits.json").exists()
