"""Cool-down branches (schema revision 1.2; Hägele et al. 2024): the branch columns, branches out
of the size-law fits, the cooled-down regime verdict, L(N, D) on branch ends, check 5 of the
main job."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from fitting.core.base import FitError
from fitting.data.rundirs import collect_runs
from fitting.data.schema import OPTIONAL_COLUMNS, SCHEMA_REVISION, TIDY_COLUMNS
from fitting.data.tables import (
    final_losses,
    has_branches,
    read_table,
    with_optional_columns,
    without_branches,
    write_table,
)
from fitting.test_utils import make_final_table, write_run_dirs


def _edit_run_json(d: str, edit) -> None:
    path = os.path.join(d, "run.json")
    with open(path) as f:
        meta = json.load(f)
    edit(meta)
    with open(path, "w") as f:
        json.dump(meta, f)


def _branch_dir(parent_dir: str, root: str, step: int) -> str:
    """A branch of the run directory ``parent_dir`` leaving at ``step``: rows after it only."""
    with open(os.path.join(parent_dir, "run.json")) as f:
        meta = json.load(f)
    run = f"{meta['run_id']}_cd{step}"
    d = os.path.join(root, run)
    os.makedirs(d)
    meta.update(run_id=run, branch={"parent": meta["run_id"], "step": step,
                                    "cooldown_steps": 100})
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(parent_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for r in rows:
            if r["step"] > step:  # the branch ends at step 700, 10 % above its parent's loss
                s = min(r["step"], 700)
                r = {**r, "run_id": run, "step": s, "tokens": s * 512, "value": r["value"] * 1.1}
                f.write(json.dumps(r) + "\n")
    return d


# -- (a) schema revision 1.2: the branch columns ----------------------------------------------------


def test_branch_columns_load_from_run_directories_and_round_trip_csv(tmp_path):
    assert SCHEMA_REVISION == "1.2"
    assert {"parent_run": "str", "branch_step": "int"}.items() <= TIDY_COLUMNS.items()
    fin = make_final_table(sizes=[1e5, 1e6], weights=(0.5,))
    dirs = write_run_dirs(fin, str(tmp_path / "runs"))
    branch = _branch_dir(dirs[0], str(tmp_path / "runs"), 400)
    tab = collect_runs([*dirs, branch])
    by_run = tab.drop_duplicates("run_id").set_index("run_id")
    parent = os.path.basename(dirs[0])
    assert by_run.loc[f"{parent}_cd400", "parent_run"] == parent
    assert by_run.loc[f"{parent}_cd400", "branch_step"] == 400
    assert (by_run.loc[[os.path.basename(d) for d in dirs], "parent_run"] == "").all()
    assert by_run.loc[[os.path.basename(d) for d in dirs], "branch_step"].isna().all()
    # the branch's own rows: steps after 400 only, its final row at its own last step
    rows = tab[(tab["run_id"] == f"{parent}_cd400") & (tab["metric"] == "loss")]
    assert rows["step"].min() > 400 and set(rows.loc[rows["final"], "step"]) == {700}
    # CSV: "" reads back as NaN, and is "" again once the optional columns are filled in
    write_table(tab, tmp_path / "t.csv")
    back = with_optional_columns(read_table(tmp_path / "t.csv"))
    assert list(back["parent_run"]) == list(tab["parent_run"])
    assert np.array_equal(back["branch_step"].isna(), tab["branch_step"].isna())
    assert has_branches(back) and not has_branches(without_branches(back))


def test_tables_without_branch_columns_load_as_before():
    old = make_final_table(sizes=[1e5, 1e6], weights=(0.5,))
    assert {"parent_run", "branch_step"} <= set(OPTIONAL_COLUMNS)
    filled = with_optional_columns(old)
    assert (filled["parent_run"] == "").all() and filled["branch_step"].isna().all()
    assert not has_branches(old) and without_branches(old) is old
    assert len(final_losses(old)[0]) == len(old)


@pytest.mark.parametrize("branch, field", [
    ("cd500", "'branch'"),                                  # not an object
    ([1, 2], "'branch'"),
    ({"step": 5, "cooldown_steps": 1}, "'branch.parent'"),  # parent missing
    ({"parent": "", "step": 5}, "'branch.parent'"),          # parent empty
    ({"parent": 3, "step": 5}, "'branch.parent'"),
    ({"parent": "a", "step": -1}, "'branch.step'"),         # step not an int >= 0
    ({"parent": "a", "step": 5.0}, "'branch.step'"),
    ({"parent": "a", "step": True}, "'branch.step'"),
    ({"parent": "a"}, "'branch.step'"),
    ({"parent": "a", "step": 5, "cooldown_steps": "x"}, "'branch.cooldown_steps'"),
])
def test_malformed_branch_names_run_json_and_the_field(tmp_path, branch, field):
    fin = make_final_table(sizes=[1e5], weights=(0.5,))
    (d,) = write_run_dirs(fin, str(tmp_path))
    _edit_run_json(d, lambda m: m.update(branch=branch))
    with pytest.raises(FitError, match="run.json") as e:
        collect_runs([d])
    assert field in str(e.value)


def test_null_branch_is_an_ordinary_run(tmp_path):
    fin = make_final_table(sizes=[1e5], weights=(0.5,))
    (d,) = write_run_dirs(fin, str(tmp_path))
    _edit_run_json(d, lambda m: m.update(branch=None))
    tab = collect_runs([d])
    assert (tab["parent_run"] == "").all() and tab["branch_step"].isna().all()
