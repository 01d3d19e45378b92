"""Property-based fuzzing (hypothesis) of every input reader: bad input gives the documented error.

The bitext reader, ``metrics.jsonl`` and run directories, the metrics-table loader, the laws and
every ``mnmt-fit`` subcommand, the study spec and its gin bindings. Each property runs twice: a
short, derandomized draw in the default suite (``short``) and a long random one under
``pytest -m faults`` (``long``). A failure prints the falsifying example; the plain tests at the
end reproduce the inputs that found the defects fixed so far.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitting.core.base import FitError
from fitting.core.options import NO_UNCERTAINTY, BacktestOptions
from fitting.data.rundirs import parse_metrics_jsonl, read_metrics_jsonl, read_run_dir
from fitting.data.tables import read_table

# -- running a property at two lengths -------------------------------------------------------------

SHORT, LONG = 15, 300
RUNS = [pytest.param(SHORT, id="short"), pytest.param(LONG, id="long", marks=pytest.mark.faults)]


def check(prop: Callable, *strategies, examples: int, deadline_ms: int = 2000) -> None:
    """Run ``prop`` on ``examples`` draws; the short runs are derandomized (same draws each time)."""
    settings(max_examples=examples, deadline=deadline_ms, database=None,
             derandomize=examples <= SHORT, print_blob=True,
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                    HealthCheck.filter_too_much])(given(*strategies)(prop))()


def one_line(message: str) -> bool:
    return bool(message) and "\n" not in message.strip() and "Traceback" not in message


# -- the bitext reader ----------------------------------------------------------------------------

FIELD = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n"),
                max_size=8)
TSV_LINE = st.lists(FIELD, min_size=0, max_size=4)


def _warm_up_gfile() -> None:
    """Import tensorflow (the reader's tf.io.gfile) before the clock of the first example runs."""
    import tensorflow as tf

    tf.io.gfile.exists(tempfile.gettempdir())


def _bitext_model(lines: list[str]) -> tuple[list[tuple[str, str]], int | None]:
    """The documented contract: (pairs before the first bad line, that line's number or None)."""
    pairs = []
    for lineno, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        cols = line.split("\t")
        if not line.strip() or len(cols) != 2 or not cols[0].strip() or not cols[1].strip():
            return pairs, lineno
        pairs.append((cols[0].strip(), cols[1].strip()))
    return pairs, None


@pytest.mark.parametrize("examples", RUNS)
def test_bitext_tsv_lines_round_trip_or_name_the_first_bad_line(examples):
    from mnmt.data.sources.bitext import BitextError, count_bitext, read_bitext

    _warm_up_gfile()

    def prop(lines: list[list[str]], crlf: bool, gz: bool) -> None:
        texts = ["\t".join(fields) for fields in lines]
        data = "".join(t + ("\r\n" if crlf else "\n") for t in texts).encode("utf-8")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "f.tsv.gz" if gz else "f.tsv")
            with (gzip.open if gz else open)(path, "wb") as f:
                f.write(data)
            want, bad = _bitext_model(texts)
            if bad is None:
                assert list(read_bitext(path)) == want
            else:
                with pytest.raises(BitextError) as err:
                    list(read_bitext(path))
                assert str(err.value).startswith(f"{path}:{bad}: ") and one_line(str(err.value))
            stats = count_bitext(path, skip_malformed=True)
            good = sum(_bitext_model([t])[1] is None for t in texts)
            assert (stats.read, stats.skipped) == (good, len(texts) - good)

    check(prop, st.lists(TSV_LINE, max_size=6), st.booleans(), st.booleans(), examples=examples)


@pytest.mark.parametrize("examples", RUNS)
def test_bitext_random_bytes_give_pairs_or_bitext_error(examples):
    from mnmt.data.sources.bitext import BitextError, read_bitext

    _warm_up_gfile()

    def prop(raw: bytes, tgt: bytes, how: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "f.tsv.gz" if how != "plain" else "f.tsv")
            if how == "gzip":
                raw = gzip.compress(raw)
            elif how == "truncated gzip":
                raw = gzip.compress(raw)[: max(1, len(raw) // 2)]
            elif how == "gzip magic":
                raw = b"\x1f\x8b\x08\x00" + raw
            with open(path, "wb") as f:
                f.write(raw)
            tgt_path = os.path.join(tmp, "t.txt")
            with open(tgt_path, "wb") as f:
                f.write(tgt)
            for args in ((path,), (path, tgt_path)):
                try:
                    pairs = list(read_bitext(*args))
                except BitextError as e:
                    assert one_line(str(e)) and str(e).startswith(tmp), str(e)
                    continue
                assert all(s and t and s == s.strip() and t == t.strip() for s, t in pairs)

    check(prop, st.binary(max_size=200), st.binary(max_size=60),
          st.sampled_from(["plain", "gzip", "truncated gzip", "gzip magic"]), examples=examples)


# -- metrics.jsonl, run.json and the metrics table --------------------------------------------------

GOOD_ROW = {"run_id": "r", "step": 10, "tokens": 100, "task": "en-de", "eval_set": "validation",
            "metric": "loss", "value": 2.5}
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=2),
    max_leaves=4,
)


@st.composite
def metrics_line(draw) -> str:
    kind = draw(st.sampled_from(["good", "good", "drop", "retype", "text", "non-finite", "array"]))
    row = dict(GOOD_ROW, step=draw(st.integers(0, 10**6)),
               value=draw(st.none() | st.floats(0.1, 10)))
    if kind == "drop":
        del row[draw(st.sampled_from(sorted(row)))]
    elif kind == "retype":
        row[draw(st.sampled_from(sorted(row)))] = draw(JSON_VALUE)
    elif kind == "text":
        return draw(st.text(max_size=30).filter(lambda t: "\n" not in t))
    elif kind == "non-finite":
        return json.dumps(row).replace('"value": ' + json.dumps(row["value"]),
                              '"value": ' + draw(st.sampled_from(["NaN", "Infinity", "-Infinity",
                                                                   "1e999"])))
    elif kind == "array":
        return json.dumps([row])
    return json.dumps(row)  # NaN/inf floats from JSON_VALUE come out as NaN/Infinity tokens


def _valid_row(row: object) -> bool:
    if not isinstance(row, dict):
        return False
    for key in GOOD_ROW:
        v = row.get(key, ...)
        if key == "value":
            ok = v is None or (isinstance(v, int | float) and not isinstance(v, bool)
                               and math.isfinite(v))
        elif key in ("step", "tokens"):
            ok = isinstance(v, int) and not isinstance(v, bool)
        else:
            ok = isinstance(v, str)
        if not ok:
            return False
    return True


@pytest.mark.parametrize("examples", RUNS)
def test_metrics_jsonl_lines_are_rows_of_the_schema_or_name_the_first_bad_line(examples):
    def prop(lines: list[str], crlf: bool) -> None:
        text = "".join(line + ("\r\n" if crlf else "\n") for line in lines)
        first_bad = None
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                ok = _valid_row(json.loads(line))
            except (ValueError, RecursionError):
                ok = False
            if not ok:
                first_bad = lineno
                break
        try:
            rows = parse_metrics_jsonl(text, source="m.jsonl")
        except FitError as e:
            assert first_bad is not None, f"refused valid rows: {e}"
            assert str(e).startswith(f"m.jsonl: line {first_bad}: ") and one_line(str(e)), str(e)
            return
        assert first_bad is None, f"line {first_bad} accepted: {lines[first_bad - 1]!r}"
        assert all(_valid_row(r) for r in rows)

    check(prop, st.lists(metrics_line(), max_size=5), st.booleans(), examples=examples)


@pytest.mark.parametrize("examples", RUNS)
def test_metrics_and_run_files_of_random_bytes_give_fit_errors(examples):
    def prop(metrics: bytes, run: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in (("metrics.jsonl", metrics), ("run.json", run)):
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(data)
            for call in (lambda: read_metrics_jsonl(os.path.join(tmp, "metrics.jsonl")),
                         lambda: read_run_dir(tmp)):
                with contextlib.suppress(FitError):
                    call()

    junk = st.binary(max_size=100) | st.text(max_size=60).map(lambda t: t.encode("utf-8"))
    check(prop, junk, junk, examples=examples)


RUN_JSON = st.fixed_dictionaries({
    "run_id": st.just("r") | JSON_VALUE,
    "model": st.fixed_dictionaries({"params": st.fixed_dictionaries(
        {"non_embedding": st.integers(1, 10**9) | JSON_VALUE}) | JSON_VALUE,
        "size": st.just("mini-1") | JSON_VALUE}) | JSON_VALUE,
    "mixture": st.fixed_dictionaries({
        "weights": st.fixed_dictionaries({"en-de": st.floats(0, 1) | JSON_VALUE}) | JSON_VALUE,
        "caps": st.fixed_dictionaries({"en-de": st.integers(1, 99) | JSON_VALUE}) | JSON_VALUE,
    }) | JSON_VALUE,
})


@pytest.mark.parametrize("examples", RUNS)
def test_run_directories_with_odd_run_json_fields_give_the_table_or_a_fit_error(examples):
    def prop(meta: dict) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "run.json"), "w") as f:
                json.dump(meta, f)
            with open(os.path.join(tmp, "metrics.jsonl"), "w") as f:
                f.write(json.dumps(GOOD_ROW) + "\n")
            try:
                df = read_run_dir(tmp)
            except FitError as e:
                assert str(e).startswith(tmp) and one_line(str(e)), str(e)
                return
            assert len(df) == 1 and df["value"].iloc[0] == 2.5

    check(prop, RUN_JSON, examples=examples)


CSV_CELL = st.sampled_from(["1", "2.5", "1e9", "-3", "0", "nan", "inf", "", "x", '"a,b"', "1e999",
                            "true"])


@pytest.mark.parametrize("examples", RUNS)
def test_random_csv_tables_read_or_fail_in_one_line_naming_the_file(examples):
    def prop(header: list[str], rows: list[list[str]], raw: bytes, suffix: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t" + suffix)
            text = "\n".join(",".join(r) for r in [header, *rows]).encode() + raw
            with (gzip.open if suffix.endswith(".gz") else open)(path, "wb") as f:
                f.write(text)
            try:
                read_table(path)
            except FitError as e:
                assert str(e).startswith(path) and one_line(str(e)), repr(str(e))

    names = st.lists(st.sampled_from(["n", "loss", "weight", "pair", "", "n.1"]), max_size=4)
    check(prop, names, st.lists(st.lists(CSV_CELL, max_size=5), max_size=4),
          st.binary(max_size=20), st.sampled_from([".csv", ".csv.gz", ".tsv", ".parquet",
                                                   ".jsonl"]), examples=examples)


# -- the laws -------------------------------------------------------------------------------------

NUMBER = (st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -1.0, 1e-300,
                                                                            1e300])
          | st.floats(1e3, 1e10))
LOSS = st.floats(allow_nan=True, allow_infinity=True) | st.floats(0.01, 20)


def _finite_params(fit) -> None:
    assert all(math.isfinite(v) for v in fit.params.values()), fit.params


@pytest.mark.parametrize("examples", RUNS)
def test_power_law_on_any_points_fits_finitely_or_raises_fit_error(examples):
    from fitting.laws.size.power import fit_power_law

    def prop(points: list[tuple[float, float]]) -> None:
        n, loss = zip(*points, strict=True) if points else ((), ())
        try:
            fit = fit_power_law(list(n), list(loss), uncertainty=NO_UNCERTAINTY,
                                backtest=BacktestOptions() if len(points) > 4 else None)
        except FitError as e:
            assert one_line(str(e))
            return
        _finite_params(fit)
        assert fit.params["beta"] >= 0 and fit.params["l_inf"] >= 0
        assert len(set(n)) >= 3 and all(x > 0 and math.isfinite(x) for x in n + loss)

    check(prop, st.lists(st.tuples(NUMBER, LOSS), max_size=7), examples=examples,
          deadline_ms=5000)


def _law_points(draw, sizes: int, weights: list[float]) -> pd.DataFrame:
    """Points of eq. 7 whose curve stands out of the noise (±0.2 %): a well-determined fit."""
    alpha = draw(st.floats(0.1, 0.6))
    rows = []
    for w in weights:
        beta = draw(st.floats(0.3, 3.0)) * 1e5 ** alpha  # reducible loss at the smallest size
        for n in np.geomspace(1e5, 1e8, sizes):
            noise = draw(st.floats(-0.002, 0.002))
            rows.append({"pair": "en-de", "weight": w, "n": float(n),
                         "loss": (beta * n ** -alpha + 1.5) * (1 + noise)})
    return pd.DataFrame(rows)


@st.composite
def law_table(draw) -> pd.DataFrame:
    weights = draw(st.lists(st.sampled_from([0.3, 0.5, 1.0]), min_size=1, max_size=2,
                            unique=True))
    return _law_points(draw, draw(st.integers(4, 6)), weights)


def _close(a, b, n: np.ndarray, p: float) -> None:
    """Same parameters to 0.1 % (far below their standard errors; the optimizer stops within
    its tolerance, and a nearly flat curve leaves β and α loosely determined) and the same
    predictions to 1e-6 of the loss."""
    assert a.params.keys() == b.params.keys()
    for k in a.params:
        assert a.params[k] == pytest.approx(b.params[k], rel=1e-3, abs=1e-6), k
    args = (n,) if a.law == "power" else (n, p)
    np.testing.assert_allclose(a.predict(*args), b.predict(*args), rtol=1e-6)


@pytest.mark.parametrize("examples", RUNS)
def test_fits_do_not_depend_on_row_order_or_on_duplicating_the_table(examples):
    """Rows are a set of measurements: shuffled rows give the same fit, and the table twice over
    (every point measured twice, as seeds) the same parameters."""
    from fitting.laws.size.joint import fit_joint_law
    from fitting.laws.size.power import fit_power_law

    def prop(df: pd.DataFrame, seed: int) -> None:
        kw = {"uncertainty": NO_UNCERTAINTY, "backtest": None}
        shuffled = df.sample(frac=1.0, random_state=seed)
        twice = pd.concat([df, df])
        n, w = df["n"].to_numpy(), df["weight"].to_numpy()
        base = fit_joint_law(df, **kw)
        _close(base, fit_joint_law(shuffled, **kw), n, w)
        _close(base, fit_joint_law(twice, **kw), n, w)
        one = df[df["weight"] == w[0]]
        fit = fit_power_law(one["n"], one["loss"], **kw)
        _close(fit, fit_power_law(one["n"][::-1], one["loss"][::-1], **kw), n, w[0])
        _close(fit, fit_power_law(pd.concat([one["n"]] * 2), pd.concat([one["loss"]] * 2), **kw),
               n, w[0])

    check(prop, law_table(), st.integers(0, 99), examples=max(5, examples // 10),
          deadline_ms=10_000)


@st.composite
def bad_table(draw) -> pd.DataFrame:
    """A law table with some damage: a bad cell, one size, one weight, duplicated rows."""
    df = draw(law_table())
    damage = draw(st.sampled_from(["cell", "one size", "one weight", "duplicates", "none"]))
    if damage == "cell":
        i = draw(st.integers(0, len(df) - 1))
        col = draw(st.sampled_from(["n", "loss", "weight"]))
        df[col] = df[col].astype(object)
        df.iloc[i, df.columns.get_loc(col)] = draw(
            st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1.5, "x", None, True]))
    elif damage == "one size":
        df["n"] = df["n"].iloc[0]
    elif damage == "one weight":
        df = df[df["weight"] == df["weight"].iloc[0]]
    elif damage == "duplicates":
        df = pd.concat([df.iloc[:2]] * 3)
    return df.reset_index(drop=True)


@pytest.mark.parametrize("examples", RUNS)
def test_laws_on_damaged_tables_fit_finitely_or_raise_fit_error(examples):
    from fitting.laws.size.effective import fit_multilingual_law
    from fitting.laws.size.joint import fit_joint_law

    def prop(df: pd.DataFrame) -> None:
        for fit_law in (fit_joint_law, fit_multilingual_law):
            try:
                fit = fit_law(df, uncertainty=NO_UNCERTAINTY, backtest=None)
            except FitError as e:
                assert one_line(str(e)), str(e)
                continue
            _finite_params(fit)
            for col in ("n", "loss"):
                assert (pd.to_numeric(df[col]) > 0).all() and np.isfinite(
                    pd.to_numeric(df[col])).all()

    check(prop, bad_table(), examples=max(5, examples // 5), deadline_ms=20_000)


# -- mnmt-fit -------------------------------------------------------------------------------------


def _mnmt_fit(argv: list[str]) -> tuple[int, str]:
    from fitting.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


LAW_ARGS = {
    "power": ["fit", "--law", "power"],
    "joint": ["fit", "--law", "joint"],
    "multilingual": ["fit", "--law", "multilingual"],
    "bivariate": ["fit", "--law", "bivariate"],
    "chinchilla": ["fit", "--law", "chinchilla"],
    "dpl": ["fit", "--law", "dpl"],
    "quality": ["fit", "--law", "quality"],
    "recommend": ["recommend", "--n", "1e9"],
    "frontier": ["frontier", "--sizes", "1e8"],
}


@st.composite
def cli_table(draw) -> pd.DataFrame:
    df = draw(bad_table())
    n, loss = (pd.to_numeric(df[c], errors="coerce") for c in ("n", "loss"))
    extra = {"n_enc": lambda: n * 0.5, "n_dec": lambda: n * 0.5 + 1, "d": lambda: n * 20,
             "data_size": lambda: pd.Series(1e6, index=df.index), "bleu": lambda: 40 - 5 * loss,
             "pair": lambda: pd.Series(draw(st.sampled_from(["en-de", "x"])), index=df.index)}
    for col in draw(st.lists(st.sampled_from(sorted(extra)), unique=True)):
        df[col] = extra[col]()
    for col in draw(st.lists(st.sampled_from(list(df.columns)), max_size=1)):
        df[col] = draw(st.sampled_from(["abc", math.nan, -2.0]))
    return df


@pytest.mark.parametrize("examples", RUNS)
def test_mnmt_fit_exits_0_or_2_with_one_line_on_any_table(examples):
    def prop(df: pd.DataFrame, cmd: str, drop: bool, columns: str | None) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.csv")
            df.to_csv(path, index=False)
            argv = [*LAW_ARGS[cmd], "--input", path, "--uncertainty", "none"]
            argv += ["--drop-invalid"] if drop else []
            argv += ["--columns", columns] if columns else []
            code, err = _mnmt_fit(argv)
            assert code in (0, 2)
            if code == 2:
                assert err.startswith("mnmt-fit: error: ") and one_line(err), err

    check(prop, cli_table(), st.sampled_from(sorted(LAW_ARGS)), st.booleans(),
          st.none() | st.sampled_from(["n=loss", "loss=n", "n=weight,loss=n", "x=y", "n=n"]),
          examples=max(5, examples // 3), deadline_ms=30_000)


def test_mnmt_fit_subprocess_prints_one_line_and_no_traceback(tmp_path):
    """The console script itself (a handful of inputs: each call starts a Python)."""
    bad = tmp_path / "bad.csv"
    bad.write_text("n,loss,weight\n1e6,abc,0.5\n2e6,2.0,0.5\n4e6,1.9,0.5\n")
    dup = tmp_path / "dup.csv"
    dup.write_text("n,loss,params\n1e6,2.0,1e6\n2e6,1.9,2e6\n4e6,1.8,4e6\n")
    for argv in (["fit", "--law", "quality", "--input", str(bad)],
                 ["fit", "--law", "power", "--input", str(dup), "--columns", "n=params"]):
        proc = subprocess.run([sys.executable, "-m", "fitting.cli", *argv], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("mnmt-fit: error: ") and one_line(proc.stderr), proc.stderr


# -- the study spec and its gin bindings ----------------------------------------------------------

GIN_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats() | st.text(max_size=6),
    lambda inner: st.tuples(inner) | st.tuples(inner, inner) | st.lists(inner, max_size=3),
    max_leaves=5,
)


@pytest.mark.parametrize("examples", RUNS)
def test_study_spec_fields_take_any_value_or_raise_study_error_naming_the_field(examples):
    from mnmt.study.spec import StudyError, StudySpec, expand, field_names, group_runs

    fields = sorted(field_names())

    def prop(field: str, value: object) -> None:
        try:  # gin adds "  In call to configurable 'StudySpec'" lines; the CLI prints the first
            spec = StudySpec.of(**{field: value})
        except StudyError as e:
            assert str(e).startswith(f"StudySpec.{field}: "), str(e)
            return
        try:
            group_runs(spec, expand(spec))
        except StudyError as e:
            assert str(e).startswith("StudySpec."), str(e)

    check(prop, st.sampled_from(fields), GIN_VALUE, examples=examples * 4)


@pytest.mark.parametrize("examples", RUNS)
def test_study_gin_bindings_and_files_give_a_spec_or_a_one_line_error(examples):
    from mnmt.study.spec import StudyError, field_names
    from mnmt.study.stages import UsageError, load_spec

    fields = sorted(field_names())
    value_text = st.sampled_from(["1", "-1", "0.5", "'a'", "(1, 2)", "[0.5, 2]", "nan", "None",
                                  "True", "@x", "%y", "(", "'", "1e999", "((1,), 'a')", "'a/b'",
                                  "{'a': 1}", "()", "inf"]) | st.text(max_size=8)

    def prop(field: str, value: str, in_file: bool) -> None:
        binding = f"StudySpec.{field} = {value}"
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.gin")
            with open(path, "w") as f:
                f.write(binding + "\n" if in_file else "")
            try:
                if in_file:
                    load_spec(path, None, [])
                else:
                    load_spec(None, "ci", [binding.replace(" = ", "=", 1)])
            except (UsageError, StudyError) as e:
                assert str(e).strip() and "Traceback" not in str(e), str(e)

    check(prop, st.sampled_from(fields), value_text, st.booleans(), examples=examples * 2)


# -- regression tests: the inputs that found the defects ------------------------------------------


def test_corrupt_gzip_stream_is_a_bitext_error(tmp_path):
    """A gzip header over a corrupt deflate stream raised zlib.error."""
    from mnmt.data.sources.bitext import BitextError, read_bitext

    path = tmp_path / "x.tsv.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 11)
    with pytest.raises(BitextError, match=r"x\.tsv\.gz: cannot read .*expected a valid gzip"):
        list(read_bitext(str(path)))


def test_run_files_with_invalid_utf8_name_file_and_line(tmp_path):
    """Bytes that are not UTF-8 raised UnicodeDecodeError naming neither file nor line."""
    (tmp_path / "run.json").write_bytes(b'{"run_id": "r",\n "study": "\x80"}')
    (tmp_path / "metrics.jsonl").write_bytes(json.dumps(GOOD_ROW).encode() + b"\n\xff\n")
    with pytest.raises(FitError, match=r"run\.json: line 2: invalid UTF-8"):
        read_run_dir(str(tmp_path))
    with pytest.raises(FitError, match=r"metrics\.jsonl: line 2: invalid UTF-8"):
        read_metrics_jsonl(str(tmp_path / "metrics.jsonl"))


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_metrics_jsonl_non_finite_value_is_refused(token):
    """Not JSON (or overflowing), and the schema writes a non-finite value as null: NaN and inf
    were read as measurements."""
    line = json.dumps(GOOD_ROW).replace("2.5", token)
    with pytest.raises(FitError, match=r"m: line 1: field 'value' should be a finite number"):
        parse_metrics_jsonl(line + "\n", source="m")


def test_metrics_jsonl_deeply_nested_line_is_a_fit_error():
    """json.loads raised RecursionError."""
    with pytest.raises(FitError, match=r"m: line 2: invalid JSON: nested too deeply"):
        parse_metrics_jsonl(json.dumps(GOOD_ROW) + "\n" + "[" * 100_000 + "\n", source="m")


@pytest.mark.parametrize("meta,what", [
    ({"run_id": "r", "model": {"params": [1, 2]}}, "'model.params' should be an object"),
    ({"run_id": "r", "mixture": {"weights": {"en-de": "0.5"}}},
     "'mixture.weights.en-de' should be a number or null"),
    ({"run_id": "r", "mixture": {"weights": {"en-de": None}, "caps": {"en-de": [3]}}},
     "'mixture.caps.en-de' should be a number or null"),
    ({"run_id": ["r"]}, "'run_id' should be a str"),
])
def test_run_json_fields_of_the_wrong_type_are_named(tmp_path, meta, what):
    """A list as model.params raised AttributeError, a string weight ValueError, a null weight
    TypeError; a list run_id was turned into the string "['r']"."""
    (tmp_path / "run.json").write_text(json.dumps(meta))
    (tmp_path / "metrics.jsonl").write_text(json.dumps(GOOD_ROW) + "\n")
    with pytest.raises(FitError, match=rf"run\.json: field {what}"):
        read_run_dir(str(tmp_path))


def test_column_map_onto_an_existing_column_is_refused():
    """--columns n=params on a table with both n and params gave two 'n' columns, and the next
    check raised TypeError."""
    df = pd.DataFrame({"n": [1.0], "params": [2.0], "loss": [3.0]})
    with pytest.raises(FitError, match=r"two columns named 'n' \(from \['n', 'params'\]"):
        read_table(df, "n=params")
    with pytest.raises(FitError, match="maps several of our names to column 'loss'"):
        read_table(df, "n=loss,value=loss")
    assert list(read_table(df, "n=n")) == ["n", "params", "loss"]


def test_mnmt_fit_quality_with_a_non_number_names_the_row(tmp_path):
    """A non-numeric loss or metric cell raised ValueError from to_numpy(float)."""
    path = tmp_path / "q.csv"
    path.write_text("loss,bleu\nx,30\n2.0,28\n1.8,31\n")
    code, err = _mnmt_fit(["fit", "--law", "quality", "--input", str(path)])
    assert code == 2 and "column 'loss', row 0: expected a number, got 'x'" in err


def test_power_law_over_an_overflowing_size_range_is_refused():
    """Sizes 1e-300 … 2 made x^(−α) overflow: ValueError from inside the solver."""
    from fitting.laws.size.power import fit_power_law

    with pytest.raises(FitError, match="column 'n' spans 1e-300 to 2, more than 1e"):
        fit_power_law([1.0, 2.0, 1e-300], [1.0, 1.0, 1.0],
                      uncertainty=NO_UNCERTAINTY)


def test_require_finite_params_refuses_an_overflowed_fit():
    from fitting.laws.size.power import require_finite_params

    with pytest.raises(FitError, match=r"law 'joint': the fit gave non-finite parameters"):
        require_finite_params({"alpha": 0.3, "beta": math.inf}, "joint")


@pytest.mark.parametrize("field,value,message", [
    ("weights", 0.5, "StudySpec.weights: expected a tuple, got 0.5"),
    ("weights", ("a",), "StudySpec.weights: expected a number p or one number per pair"),
    ("weights", ((math.inf, 1.0),), "StudySpec.weights: expected finite non-negative weights"),
    ("heldout", (("mini-3", 1.5),), "StudySpec.heldout: expected p in [0, 1], got 1.5"),
    ("name", 5, "StudySpec.name: expected a string, got 5"),
    ("feature_lengths", (("inputs", "a"),), "StudySpec.feature_lengths: expected a tuple of"),
    ("train_steps", True, "StudySpec.train_steps: expected an integer, got True"),
    ("learning_rate", math.nan, "StudySpec.learning_rate: expected finite positive numbers"),
    ("dropout_rate", 1.0, "StudySpec.dropout_rate: expected a rate in [0, 1)"),
    ("tasks", ("en-de",), "StudySpec.tasks: expected a tuple of (str, str) pairs"),
])
def test_study_spec_values_of_the_wrong_kind_name_the_field(field, value, message):
    """weights=0.5 raised TypeError, ("a",) ValueError; (inf, 1) gave NaN weights; a bad heldout
    weight was reported as StudySpec.weights; name=5 raised TypeError; a NaN learning rate
    passed."""
    from mnmt.study.spec import StudyError, StudySpec

    with pytest.raises(StudyError) as err:
        StudySpec.of(**{field: value})
    assert str(err.value).splitlines()[0].startswith(message), str(err.value)


def test_study_gin_value_that_does_not_tokenize_is_a_usage_error(tmp_path):
    """--gin StudySpec.batch_size=( raised tokenize.TokenError; an undefined %macro in a study
    file raised TypeError."""
    from mnmt.study.stages import UsageError, load_spec

    with pytest.raises(UsageError, match=r"--gin.StudySpec.batch_size=\(: cannot parse value"):
        load_spec(None, "ci", ["StudySpec.batch_size=("])
    path = tmp_path / "s.gin"
    path.write_text("StudySpec.batch_size = %undefined\n")
    with pytest.raises(UsageError, match=r"s\.gin: .*missing"):
        load_spec(str(path), None, [])
