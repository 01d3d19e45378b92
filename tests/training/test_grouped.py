"""train_group: runs of one model trained as one vmapped program match runs trained alone."""

from __future__ import annotations

import os
import random
import signal

import pytest
from run_helpers import cut_back, rows_by_key, run_child, write_child_spec

from mnmt.training import run_files


@pytest.fixture(scope="module")
def second_mixture(tiny_data):
    from mnmt.data import mixtures

    return mixtures.register_weighted_mixture(
        "trainer_test_p80", {t: w for t, w in zip(tiny_data["tasks"].values(), (0.8, 0.2),
                                                  strict=True)})


def _assert_rows_close(a_dir: str, b_dir: str, rel: float) -> None:
    a = rows_by_key(run_files.read_metrics(a_dir))
    b = rows_by_key(run_files.read_metrics(b_dir))
    assert a.keys() == b.keys(), "grouped and single runs wrote different rows"
    for key, value in a.items():
        assert b[key] == pytest.approx(value, rel=rel, abs=1e-6), key


def test_grouped_runs_match_runs_trained_alone(make_config, second_mixture):
    from mnmt.training.trainer import train, train_group

    alone = [make_config("alone_a"), make_config("alone_b", seed=3, inputs={
        "mixture_or_task_name": second_mixture})]
    grouped = [make_config("group_a"), make_config("group_b", seed=3, inputs={
        "mixture_or_task_name": second_mixture})]
    for config in alone:
        assert train(config, progress=lambda e: None).status == "finished"
    summaries = train_group(grouped, progress=lambda e: None)
    assert [s.status for s in summaries] == ["finished", "finished"]
    for a, g in zip(alone, grouped, strict=True):
        _assert_rows_close(a.model_dir, g.model_dir, rel=1e-3)  # vmap: other sum orders
        run = run_files.read_run_json(g.model_dir)
        assert run["status"] == "finished" and run["final_step"] == g.train_steps
    # the two members really trained on different data and seeds
    a = rows_by_key(run_files.read_metrics(grouped[0].model_dir))
    b = rows_by_key(run_files.read_metrics(grouped[1].model_dir))
    assert a[(12, "en-de", "validation", "loss")] != b[(12, "en-de", "validation", "loss")]


def test_grouped_per_pair_train_loss_rows_follow_each_members_own_mixture(make_config,
                                                                          tiny_data):
    """A member that trains one pair (the other at weight 0) beside one that trains both: the
    group's step sums two pairs, the one-pair member gets train_loss rows for `all` and its
    pair only (equal: every token is that pair's), and the exporter gives the pair rows the
    pair's weight (`all`: NaN)."""
    from fitting.data.rundirs import read_run_dir
    from mnmt.data import mixtures
    from mnmt.training.trainer import train_group

    de, zh = tiny_data["tasks"]["en-de"], tiny_data["tasks"]["en-zh"]
    only_de = mixtures.register_weighted_mixture("trainer_test_de_only", {de: 1.0, zh: 0.0})
    group = [make_config("both", train_steps=4, eval={"period": 4}),
             make_config("de", train_steps=4, eval={"period": 4}, seed=3,
                         inputs={"mixture_or_task_name": only_de})]
    assert [s.status for s in train_group(group, progress=lambda e: None)] == ["finished"] * 2
    both, one = (rows_by_key(run_files.read_metrics(c.model_dir)) for c in group)
    assert {k[1] for k in both if k[3] == "train_loss"} == {"all", "en-de", "en-zh"}
    assert {k[1] for k in one if k[3] == "train_loss"} == {"all", "en-de"}
    for step in (2, 4):
        assert one[(step, "en-de", "train", "train_loss")] == pytest.approx(
            one[(step, "all", "train", "train_loss")], rel=1e-6)
    table = read_run_dir(group[1].model_dir)
    train = table[table["metric"] == "train_loss"]
    assert set(train.loc[train["pair"] == "en-de", "weight"]) == {1.0}
    assert train.loc[train["pair"] == "all", "weight"].isna().all()
    assert list(train.loc[train["final"], "pair"].sort_values()) == ["all", "en-de"]


def test_runs_that_differ_in_more_than_data_and_seed_are_refused(make_config):
    from mnmt.training.trainer import train_group

    with pytest.raises(ValueError, match="differ in model_size"):
        train_group([make_config("x"), make_config("y", model_size="mini-2")])


def test_a_group_resumes_members_checkpointed_at_different_steps(make_config, second_mixture):
    """A kill between two members' checkpoint writes leaves them at different steps: the
    group resumes as two groups and both end as the uninterrupted group did."""
    from mnmt.training.trainer import train_group

    def group(prefix):
        return [make_config(f"{prefix}_a", checkpoint={"keep": 3}),
                make_config(f"{prefix}_b", checkpoint={"keep": 3},
                            inputs={"mixture_or_task_name": second_mixture})]

    whole, parts = group("whole"), group("parts")
    train_group(whole, progress=lambda e: None)
    train_group(parts, progress=lambda e: None)
    cut_back(parts[0].model_dir, 8)
    cut_back(parts[1].model_dir, 4)
    events = []
    summaries = train_group(parts, progress=events.append)
    assert [s.status for s in summaries] == ["finished", "finished"]
    resumed = sorted((e.run_id, e.step) for e in events if "resumed" in (e.message or ""))
    assert resumed == [("parts_a", 8), ("parts_b", 4)]
    for w, p in zip(whole, parts, strict=True):
        _assert_rows_close(w.model_dir, p.model_dir, rel=1e-3)


@pytest.mark.slow  # ≈ 1 min on 2 cores; the fast suite keeps the grouped resume at two steps
def test_sigkill_of_a_group_at_a_random_event_then_resume_matches_uninterrupted(
        make_config, second_mixture, tiny_data, tmp_path):
    """A group of two runs killed by SIGKILL (no handler runs) at a random progress event of
    the group — a training row, an evaluation or a checkpoint of either member — resumes in a
    fresh process and writes exactly the uninterrupted group's rows, none twice.
    MNMT_TEST_KILL_EVENT=i reproduces a failing draw."""
    from mnmt.training.trainer import train_group

    def group(prefix):
        return [make_config(f"{prefix}_a", checkpoint={"keep": 3}),
                make_config(f"{prefix}_b", seed=3, checkpoint={"keep": 3},
                            inputs={"mixture_or_task_name": second_mixture})]

    whole, killed = group("whole"), group("killed")
    events = []
    train_group(whole, progress=events.append)
    index = int(os.environ.get("MNMT_TEST_KILL_EVENT") or random.randrange(len(events) - 1))
    where = f"kill_event={index} ({events[index].kind} at step {events[index].step})"
    print(where)  # shown by pytest when the test fails
    spec = write_child_spec(killed[0], tiny_data, tmp_path, group=killed, kill_event=index,
                            signal="KILL", mixtures={second_mixture: [0.8, 0.2]})
    res = run_child(spec)
    assert res.returncode == -signal.SIGKILL, (where, res.stderr[-2000:])
    summaries = train_group(killed, progress=lambda e: None)
    assert [s.status for s in summaries] == ["finished", "finished"], where
    for w, k in zip(whole, killed, strict=True):
        rows = run_files.read_metrics(k.model_dir)
        keys = [(r["step"], r["task"], r["eval_set"], r["metric"]) for r in rows]
        assert len(keys) == len(set(keys)), f"duplicate rows after resume ({where})"
        _assert_rows_close(w.model_dir, k.model_dir, rel=1e-4)
