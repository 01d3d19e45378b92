"""One registration per kind of addition: a law registered from outside the package with one
call is a choice of ``mnmt-fit fit --law`` and is what that command runs; a report section
registered with one call is in every report written, its payload in ``fits.json``, and its
failure is listed under "Skipped" by the writer's one error boundary."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from fitting.cli import build_parser, main
from fitting.core.base import LAW_REGISTRY, FitResult, TableRequest, register_law, table_laws
from fitting.core.options import UncertaintyOptions
from fitting.report.section import ReportSection, SectionRun, register_section, unregister_section
from fitting.report.writer import SECTIONS, ReportOptions, write_report
from fitting.test_utils import make_final_table


@dataclass
class ConstantFit(FitResult):
    """A law from outside the package: the loss is a constant c (the table's mean loss)."""

    def predict(self, x) -> np.ndarray:
        return np.full(np.shape(x), self.params["c"])

    @classmethod
    def fit_table(cls, table: pd.DataFrame, request: TableRequest) -> ConstantFit:
        loss = table["loss"].to_numpy(float)
        return cls(law="outside_constant", params={"c": float(loss.mean())},
                   n_points=len(loss), meta={"seed": request.seed})


@pytest.fixture
def outside_law():
    register_law("outside_constant")(ConstantFit)  # the one registration call
    yield ConstantFit
    LAW_REGISTRY.pop("outside_constant")


def _law_choices() -> list[str]:
    fit = next(a for a in build_parser()._subparsers._group_actions[0].choices["fit"]._actions
               if a.dest == "law")
    return list(fit.choices)


def test_the_builtin_laws_are_the_registered_table_laws():
    assert _law_choices() == table_laws() == sorted(
        ["power", "joint", "multilingual", "bivariate", "chinchilla", "dpl", "quality"])


def test_a_law_registered_outside_is_a_choice_and_is_fitted(outside_law, tmp_path, capsys):
    assert "outside_constant" in _law_choices()
    table = tmp_path / "t.csv"
    pd.DataFrame({"n": [1e6, 2e6, 4e6], "loss": [3.0, 2.0, 1.0]}).to_csv(table, index=False)
    assert main(["fit", "--law", "outside_constant", "--input", str(table), "--seed", "7",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["law"] == "outside_constant" and out["params"] == {"c": 2.0}
    assert out["meta"] == {"seed": 7}


def test_a_law_that_is_not_registered_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--law", "outside_constant", "--input", str(tmp_path / "t.csv")])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def _run_count(run: SectionRun) -> dict:
    """A section from outside: how many runs the report fitted, and the first section's rows."""
    n_runs = int(run.view.final_seeds["run_id"].nunique())
    run.doc.h(2, "Runs counted from outside")
    run.doc.p(f"{n_runs} fitted runs.")
    return {"n_runs": n_runs, "first_rows": len(run.payloads["extrapolation"]["rows"])}


def _fails(run: SectionRun) -> None:
    raise RuntimeError("no such data")


@pytest.fixture
def outside_sections():
    register_section(ReportSection("run count", _run_count, json_key="run_count"))  # one call
    register_section(ReportSection("always fails", _fails))
    yield
    unregister_section("run count")
    unregister_section("always fails")


def test_a_section_registered_outside_is_in_the_report(outside_sections, tmp_path):
    table = make_final_table(sizes=[1e5, 3e5, 1e6, 3e6], weights=(0.5, 1.0), noise=0.01)
    rep = write_report(table, str(tmp_path),
                       ReportOptions(uncertainty=UncertaintyOptions(method=None, n_refits=2)))
    fits = json.loads(open(rep.json_path).read())
    assert fits["run_count"]["n_runs"] == table["run_id"].nunique() == 8
    assert fits["run_count"]["first_rows"] == len(fits["extrapolation"]["rows"])
    md = rep.markdown
    assert "## Runs counted from outside\n\n8 fitted runs." in md
    # after every built-in section, before the list of skipped sections
    assert md.index("Runs counted from outside") < md.index("## Skipped")
    assert fits["skipped"]["section always fails"] == "RuntimeError: no such data"


def test_the_built_in_sections_have_distinct_names_and_one_leads():
    names = [s.name for s in SECTIONS]
    assert len(set(names)) == len(names)
    assert [s.name for s in SECTIONS if s.lead] == ["extrapolation"]
