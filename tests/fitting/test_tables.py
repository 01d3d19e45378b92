import json
import os

import numpy as np
import pandas as pd
import pytest

from fitting.core.base import FitError
from fitting.data.rundirs import collect_runs
from fitting.data.tables import (
    check_finite_positive,
    check_weights,
    final_losses,
    parse_column_map,
    read_table,
    require_columns,
    write_table,
)
from fitting.test_utils import make_final_table, write_run_dirs


def test_require_columns_names_missing():
    df = pd.DataFrame({"n": [1.0], "value": [2.0]})
    with pytest.raises(FitError, match="'loss'") as ei:
        require_columns(df, ["n", "loss"], "t.csv")
    assert ei.value.column == "loss"
    assert "t.csv" in str(ei.value)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0, 0.0])
def test_check_finite_positive_names_row(bad):
    df = pd.DataFrame({"loss": [1.0, 2.0, bad, 3.0], "run_id": list("abcd")})
    with pytest.raises(FitError) as ei:
        check_finite_positive(df, "loss", "x.csv")
    msg = str(ei.value)
    assert "'loss'" in msg and "row 2" in msg and "run_id='c'" in msg
    assert ei.value.row == 2


def test_check_numeric_mistyped():
    df = pd.DataFrame({"n": ["10", "abc", "30"]})
    with pytest.raises(FitError, match=r"column 'n', row 1: expected a number, got 'abc'"):
        check_finite_positive(df, "n")


def test_check_weights_range():
    df = pd.DataFrame({"weight": [0.0, 0.5, 1.2]})
    with pytest.raises(FitError, match=r"'weight', row 2.*\[0, 1\]"):
        check_weights(df)
    assert check_weights(df.iloc[:2]).tolist() == [0.0, 0.5]


def test_column_map_parsing_and_read(tmp_path):
    assert parse_column_map("n=params, loss=val_loss") == {"n": "params", "loss": "val_loss"}
    with pytest.raises(FitError, match="ours=theirs"):
        parse_column_map("n")
    p = tmp_path / "t.csv"
    pd.DataFrame({"params": [1, 2], "val_loss": [3.0, 2.0]}).to_csv(p, index=False)
    df = read_table(str(p), columns="n=params,loss=val_loss")
    assert list(df.columns) == ["n", "loss"]
    with pytest.raises(FitError, match="missing column"):
        read_table(str(p), columns="n=size")


def test_write_read_roundtrip_csv_parquet(tmp_path):
    df = make_final_table(sizes=[1e5, 1e6], weights=(0.5, 1.0))
    for ext in ("csv", "parquet"):
        path = write_table(df, tmp_path / f"t.{ext}")
        back = read_table(path)
        assert len(back) == len(df)
        np.testing.assert_allclose(back["value"], df["value"])
    with pytest.raises(FitError, match="unknown table format"):
        write_table(df, tmp_path / "t.xlsx")


def test_collect_runs_builds_tidy_table(tmp_path):
    fin = make_final_table(sizes=[1e5, 1e6], weights=(0.3, 1.0))
    dirs = write_run_dirs(fin, str(tmp_path))
    tab = collect_runs(dirs)
    assert {"run_id", "n", "n_enc", "pair", "weight", "step", "value", "final"} <= set(tab.columns)
    ev = tab[(tab.metric == "loss")]
    assert len(ev) == 2 * len(fin)  # two steps per (run, pair)
    got, _ = final_losses(tab)
    got = got.sort_values(["run_id", "pair"]).reset_index(drop=True)
    exp = fin.sort_values(["run_id", "pair"]).reset_index(drop=True)
    np.testing.assert_allclose(got["value"], exp["value"])
    np.testing.assert_allclose(got["weight"], exp["weight"])
    assert (got["n"].to_numpy() == exp["n"].to_numpy()).all()
    # a directory of run directories reads the same
    assert len(read_table(str(tmp_path))) == len(tab)


def test_collect_runs_errors_name_file_and_line(tmp_path):
    fin = make_final_table(sizes=[1e5], weights=(1.0,))
    (d,) = write_run_dirs(fin, str(tmp_path))
    path = os.path.join(d, "metrics.jsonl")
    with open(path, "a") as f:
        f.write(json.dumps({"run_id": fin.run_id[0], "step": "ten", "task": "en-de",
                            "eval_set": "validation", "metric": "loss", "value": 1.0}) + "\n")
    n_lines = sum(1 for _ in open(path))
    with pytest.raises(FitError, match=rf"metrics.jsonl: line {n_lines}: field 'step'"):
        collect_runs([d])
    with open(path, "a") as f:
        f.write("{not json\n")
    with pytest.raises(FitError, match="metrics.jsonl: line"):
        collect_runs([d])
    with pytest.raises(FitError, match="run.json: no such file"):
        collect_runs([str(tmp_path / "nope")])


def test_collect_runs_rejects_duplicate_rows(tmp_path):
    fin = make_final_table(sizes=[1e5], weights=(1.0,))
    (d,) = write_run_dirs(fin, str(tmp_path))
    path = os.path.join(d, "metrics.jsonl")
    first = open(path).readline()
    with open(path, "a") as f:
        f.write(first)
    with pytest.raises(FitError, match="duplicate"):
        collect_runs([d])


def test_final_losses_drop_invalid_reports_count():
    df = make_final_table(sizes=[1e5, 1e6], weights=(1.0,))
    df.loc[1, "value"] = np.nan
    with pytest.raises(FitError, match="'value'"):
        final_losses(df)
    rows, dropped = final_losses(df, drop_invalid=True)
    assert dropped == 1 and len(rows) == len(df) - 1
    with pytest.raises(FitError, match="no rows with eval_set='test'"):
        final_losses(df, eval_set="test")
