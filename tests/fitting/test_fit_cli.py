import json

import pytest

from fitting.cli import main
from fitting.test_utils import make_final_table


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


def _write(tmp_path, name, df):
    p = tmp_path / name
    df.to_csv(p, index=False)
    return str(p)


def test_fit_bivariate_quality_chinchilla_dpl_json(tmp_path, capsys):
    """Every law of `--law` runs from the command line with --json and recovers its parameters."""
    import numpy as np
    import pandas as pd

    ne, nd = (a.ravel() for a in np.meshgrid(np.geomspace(1e6, 1e8, 4), np.geomspace(1e6, 1e8, 4)))
    biv = pd.DataFrame({"enc": ne, "dec": nd,
                        "loss": 2.0 * (3e7 / ne) ** 0.25 * (3e7 / nd) ** 0.3 + 1.0})
    assert main(["fit", "--law", "bivariate", "--input", _write(tmp_path, "b.csv", biv),
                 "--columns", "n_enc=enc,n_dec=dec", "--n-refits", "5", "--json"]) == 0
    d = _json(capsys)
    assert d["law"] == "bivariate" and d["stderr"] is not None
    assert abs(d["params"]["p_e"] - 0.25) < 1e-3 and abs(d["params"]["p_d"] - 0.3) < 1e-3

    loss = np.linspace(3.0, 1.5, 8)
    q = _write(tmp_path, "q.csv", pd.DataFrame({"loss": loss, "chrf": 80 - 15 * loss,
                                                "bleu": 60 * loss ** -1.2}))
    assert main(["fit", "--law", "quality", "--input", q, "--n-refits", "5", "--json"]) == 0
    d = _json(capsys)
    assert d["form"] == "power" and abs(d["params"]["p"] - 1.2) < 1e-3
    assert main(["fit", "--law", "quality", "--input", q, "--quality-metric", "chrf", "--form",
                 "linear", "--n-refits", "5", "--json"]) == 0
    d = _json(capsys)
    assert d["metric"] == "chrf" and abs(d["params"]["b"] + 15) < 1e-2

    nn, dd = (a.ravel() for a in np.meshgrid(np.geomspace(1e7, 1e9, 5), np.geomspace(1e9, 1e11, 5)))
    ch = _write(tmp_path, "c.csv", pd.DataFrame({"params": nn, "tokens": dd,
                                                 "loss": 1.8 + 480 * nn**-0.35 + 2100 * dd**-0.37}))
    assert main(["fit", "--law", "chinchilla", "--input", ch, "--columns", "n=params,d=tokens",
                 "--option", "init=varpro", "--n-refits", "20", "--json"]) == 0
    d = _json(capsys)
    assert abs(d["params"]["E"] / 1.8 - 1) < 1e-3 and abs(d["params"]["alpha"] - 0.35) < 1e-3
    assert d["meta"]["uncertainty"].startswith("bootstrap, 20")
    lo, hi = d["intervals"]["E"]
    assert lo <= d["params"]["E"] <= hi

    rows = []
    for size, bias in ((10.0, 1.5), (0.26, 3.0), (1.0, 2.5), (4.6, 2.0)):
        for p in np.linspace(0.05, 0.95, 10):
            f = (0.07 * p) ** -0.2 + (size**-0.33 - 0.5) * (1.18 * p) ** 1.21 + bias
            rows.append({"pair": f"x{size}", "weight": p, "data_size": size * 1e6, "loss": f})
    dp = _write(tmp_path, "d.csv", pd.DataFrame(rows))
    assert main(["fit", "--law", "dpl", "--input", dp, "--uncertainty", "none", "--json"]) == 0
    d = _json(capsys)
    assert abs(d["params"]["alpha"] - 0.20) < 1e-4 and abs(d["params"]["gamma"] + 0.33) < 1e-4
    assert d["stderr"] is None  # --uncertainty none: no bootstrap


def test_bad_user_table_names_table_row_and_drop_invalid_counts(tmp_path, capsys):
    import numpy as np
    import pandas as pd

    n = np.geomspace(1e5, 1e8, 5)
    df = pd.concat([pd.DataFrame({"pair": pr, "weight": 1.0, "n": n, "loss": 20 * n**-0.3 + li})
                    for pr, li in (("a", 1.0), ("b", 2.0))], ignore_index=True).astype(
        {"n": object})
    df.loc[7, "n"] = "big"  # 3rd row of group b, 8th row of the table
    p = _write(tmp_path, "u.csv", df)
    assert main(["fit", "--law", "power", "--input", p, "--uncertainty", "none"]) == 2
    err = capsys.readouterr().err
    assert "'n'" in err and "row 7" in err and "'big'" in err

    nn, dd = (a.ravel() for a in np.meshgrid(np.geomspace(1e7, 1e9, 4), np.geomspace(1e9, 1e11, 4)))
    ch = pd.DataFrame({"n": nn, "d": dd, "loss": 1.8 + 480 * nn**-0.35 + 2100 * dd**-0.37})
    ch.loc[5, "loss"] = np.nan
    ch.loc[9, "d"] = -1.0
    p = _write(tmp_path, "c.csv", ch)
    assert main(["fit", "--law", "chinchilla", "--input", p, "--option", "init=varpro",
                 "--json"]) == 2
    assert "'d', row 9" in capsys.readouterr().err  # columns are checked n, d, loss
    assert main(["fit", "--law", "chinchilla", "--input", p, "--option", "init=varpro",
                 "--uncertainty", "none", "--drop-invalid", "--json"]) == 0
    d = _json(capsys)
    assert d["n_points"] == 14 and d["meta"]["dropped_rows"] == 2


def test_dpl_drop_invalid_reports_count(tmp_path, capsys):
    import numpy as np
    import pandas as pd

    rows = [{"pair": f"x{s}", "weight": p, "data_size": s * 1e6,
             "loss": (0.07 * p) ** -0.2 + (s**-0.33 - 0.5) * (1.18 * p) ** 1.21 + 2.0}
            for s in (10.0, 0.26, 1.0, 4.6) for p in np.linspace(0.05, 0.95, 8)]
    df = pd.DataFrame(rows)
    df.loc[3, "loss"] = np.inf
    p = _write(tmp_path, "d.csv", df)
    assert main(["fit", "--law", "dpl", "--input", p, "--uncertainty", "none"]) == 2
    assert "'loss', row 3" in capsys.readouterr().err
    assert main(["fit", "--law", "dpl", "--input", p, "--uncertainty", "none", "--drop-invalid",
                 "--json"]) == 0
    d = _json(capsys)
    assert d["n_points"] == 31 and d["meta"]["dropped_rows"] == 1


def test_recommend_warns_when_f_hat_is_not_identified(tmp_path, capsys):
    import numpy as np

    from fitting.test_utils import TRUTH

    fin = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.0, 0.5, 1.0), noise=0.0)
    for pair in TRUTH:  # f(0.5) = 0.1: eq. 13 would need f̂(0) < 0
        a, b1, li, _ = TRUTH[pair]
        m = (fin.pair == pair) & (fin.weight > 0)
        fin.loc[m, "value"] = b1 * (np.where(fin.loc[m, "weight"] < 1, 0.1, 1.0)
                                    * fin.loc[m, "n"]) ** -a + li
    fin.to_csv(tmp_path / "t.csv", index=False)
    out = tmp_path / "ml.json"
    assert main(["fit", "--law", "multilingual", "--form", "eq13", "--input",
                 str(tmp_path / "t.csv"), "--uncertainty", "none", "--out", str(out)]) == 0
    assert "not identified" in capsys.readouterr().out  # the fit's own warning
    assert main(["recommend", "--fit", str(out), "--n", "1e8"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)[0]["f_hat_identified"] is False
    assert "warning: f̂ (eq13) not identified for en-de" in captured.err


@pytest.mark.parametrize("fraction", ["0", "-0.5", "1", "1.5", "nan"])
def test_a_stop_fraction_outside_its_share_is_a_one_line_error_before_any_fit(
        fraction, tidy, tmp_path, capsys):
    """`mnmt-fit report --stop-fraction F` outside (0, 1) — which wrote an empty or no early-stop
    section — is one line, exit status 2, nothing written."""
    out = tmp_path / "r"
    assert main(["report", "--input", tidy, "--out", str(out), "--stop-fraction", fraction]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "--stop-fraction: expected a share in (0, 1)" in err
    assert not out.exists()
