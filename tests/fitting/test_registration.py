"""One registration per kind of addition: a law registered from outside the package with one
call is a choice of ``mnmt-fit fit --law`` and is what that command runs."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from fitting.cli import build_parser, main
from fitting.core.base import LAW_REGISTRY, FitResult, TableRequest, register_law, table_laws


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
