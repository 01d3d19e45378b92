"""The learning-rate schedules of mnmt.training.optimizer against their closed forms written out
here: cosine (with its final fraction), warm-up–stable–decay, the unchanged rsqrt default; cosine
runs refuse cool-down branches; an AdamW + cosine run through the trainer's `train()`."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnmt.training import branches, run_files
from mnmt.training.config import BranchConfig, OptimizerConfig, TrainConfig
from mnmt.training.optimizer import learning_rate_schedule, rsqrt_schedule, schedule_for


def cosine_rate(s: int, lr: float, w: int, total: int, final: float) -> float:
    """Linear warm-up to lr over w updates, then a half cosine to final·lr at update `total`."""
    if s <= w:
        return lr * s / w
    x = (s - w) / (total - w)
    return lr * (final + (1 - final) * 0.5 * (1 + math.cos(math.pi * x)))


def rate_at(schedule, s: int) -> float:
    return float(schedule(s - 1))  # the schedule counts updates from 0: update s is count s − 1


def test_cosine_follows_the_half_cosine_from_the_peak_to_its_final_fraction():
    lr, w, total, final = 3e-3, 10, 110, 0.1
    schedule = learning_rate_schedule(lr, w, total_steps=total, decay="cosine",
                                      final_lr_fraction=final)
    for s in (1, 5, 10, 11, 35, 60, 85, 109, 110):
        assert rate_at(schedule, s) == pytest.approx(cosine_rate(s, lr, w, total, final),
                                                     rel=1e-5), s
    assert rate_at(schedule, w) == pytest.approx(lr)  # the peak at the warm-up's end
    assert rate_at(schedule, 60) == pytest.approx(lr * (final + (1 - final) / 2))  # middle
    assert rate_at(schedule, total) == pytest.approx(final * lr)  # the last update
    to_zero = learning_rate_schedule(1.0, 4, total_steps=20, decay="cosine")
    assert rate_at(to_zero, 20) == pytest.approx(0.0, abs=1e-7)  # default final fraction 0
    assert rate_at(to_zero, 12) == pytest.approx(0.5)


def test_warmup_stable_decay_is_constant_with_a_cooldown():
    lr, w, total, c = 0.02, 10, 100, 30
    for shape, factor in (("linear", lambda x: 1 - x), ("1-sqrt", lambda x: 1 - math.sqrt(x))):
        schedule = learning_rate_schedule(lr, w, total_steps=total, decay="constant",
                                          cooldown_steps=c, cooldown_shape=shape)
        assert rate_at(schedule, 5) == pytest.approx(lr * 5 / w)  # warm-up
        for s in (10, 40, 71):  # stable until the cool-down's first update, total − c + 1
            assert rate_at(schedule, s) == pytest.approx(lr)
        for s in (72, 85, 100):  # update s has x = (s − 1 − (total − c)) / c of it done
            assert rate_at(schedule, s) == pytest.approx(lr * factor((s - 71) / c), rel=1e-5)
        assert rate_at(schedule, 100) == pytest.approx(lr * factor(29 / 30))  # the last update
        assert rate_at(schedule, 101) == 0.0  # 0 once the cool-down is done


def test_the_default_schedule_is_the_unchanged_rsqrt():
    """TrainConfig's defaults (learning rate 1, 100 linear warm-up steps, rsqrt): the values the
    schedule gave before the cosine existed, lr · min(s/w, 1) / √max(s, w)."""
    config = TrainConfig(model_dir="m", model_size="mini-1", vocabulary_path="v", train_steps=10000,
                         inputs=None, eval=None)
    assert config.decay == "rsqrt" and config.optimizer is None
    schedule = schedule_for(config)
    for s in (1, 50, 100, 101, 400, 2500, 10000):
        assert rate_at(schedule, s) == pytest.approx(min(s / 100, 1) / math.sqrt(max(s, 100)))
    assert rsqrt_schedule is learning_rate_schedule  # the old name still works for callers


def test_schedule_rejects_cosine_settings_it_cannot_follow():
    with pytest.raises(ValueError, match="decay='cosine' needs total_steps > warmup_steps"):
        learning_rate_schedule(1.0, 10, decay="cosine")
    with pytest.raises(ValueError, match="final_lr_fraction .* decay='cosine' only"):
        learning_rate_schedule(1.0, 10, final_lr_fraction=0.1)
    with pytest.raises(ValueError, match="final_lr_fraction must be in"):
        learning_rate_schedule(1.0, 10, total_steps=100, decay="cosine", final_lr_fraction=1.5)


def test_cosine_runs_refuse_cooldown_branches():
    from mnmt.study.spec import StudyError, StudySpec

    config = TrainConfig(model_dir="m", model_size="mini-1", vocabulary_path="v", train_steps=100,
                         inputs=None, eval=None, decay="cosine", cooldown_steps=20,
                         branches=BranchConfig(points=(0.5,)))
    with pytest.raises(branches.BranchError, match=r"BranchConfig.points: .*decay='cosine'"):
        branches.branch_steps(config)
    assert branches.branch_steps(config.updated(decay="constant")) == [50]  # WSD: branches
    with pytest.raises(StudyError, match=r"StudySpec.cooldown_branches: .*StudySpec.decay"):
        StudySpec.of(decay="cosine", cooldown_fraction=0.2, cooldown_branches=(0.5,))
    assert StudySpec.of(decay="cosine").schedule.decay == "cosine"


def test_adamw_cosine_run_lowers_the_loss_and_logs_the_cosine_rates(make_config):
    from mnmt.training.trainer import train

    lr, w, total, final = 3e-3, 2, 12, 0.1
    config = make_config("adamw", learning_rate=lr, warmup_steps=w, train_steps=total,
                         decay="cosine", final_lr_fraction=final, log_every=1,
                         optimizer=OptimizerConfig(name="adamw", b2=0.98, weight_decay=0.01))
    summary = train(config)
    assert summary.status == "finished"
    rows = run_files.read_metrics(config.model_dir)
    rates = {r["step"]: r["value"] for r in rows if r["metric"] == "learning_rate"}
    assert sorted(rates) == list(range(1, total + 1))
    # the row at step s is the rate of update s (from count s − 1)
    np.testing.assert_allclose([rates[s] for s in sorted(rates)],
                               [cosine_rate(s, lr, w, total, final) for s in sorted(rates)],
                               rtol=1e-5)
    losses = [r["value"] for r in sorted(rows, key=lambda r: r["step"])
              if r["metric"] == "train_loss" and r["task"] == "all"]
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    evals = {(r["step"], r["task"]): r["value"] for r in rows if r["metric"] == "loss"}
    for pair in config.eval.tasks:
        assert evals[(12, pair)] < evals[(6, pair)]
    training = run_files.read_run_json(config.model_dir)["training"]
    assert (training["optimizer"], training["decay"], training["final_lr_fraction"]) == \
        ("adamw", "cosine", final)


# ---- the cool-down as an input of the compiled step ---------------------------------------
#: (T, c) of the main job's parents and of its branches' cool-downs (10 % of the branch step)
STUDY_COOLDOWNS = ((2000, 400), (1000, 100), (1333, 133), (1667, 167))


@pytest.mark.parametrize("total,cooldown", STUDY_COOLDOWNS)
def test_a_cooldown_read_from_the_program_input_is_the_constant_one_to_the_bit(total, cooldown):
    """`Schedule.bound`: the rate computed from (T, 1/c) passed in equals, at every update, the
    rate XLA compiles with T and c as constants (which it computes as left · (1/c))."""
    import jax
    import jax.numpy as jnp

    schedule = learning_rate_schedule(1.0, 100, total_steps=total, cooldown_steps=cooldown)

    def bound(count, ends):
        with schedule.bound(ends):
            return schedule(count)

    compiled_constant = jax.jit(schedule)
    compiled_input = jax.jit(bound)
    ends = jnp.asarray(schedule.inputs)
    for count in range(total + 1):
        assert compiled_input(jnp.int32(count), ends) == compiled_constant(jnp.int32(count)), count


def test_cooldown_branches_share_one_compiled_step():
    """Two cool-downs (a parent and its branch) lower to the same program; each step's
    `learning_rate` metric is its own schedule's rate."""
    import jax

    from mnmt.models.encoder_decoder import EncoderDecoderModel
    from mnmt.models.test_utils import make_batch, tiny_config
    from mnmt.training.step_functions import single_device_step_functions

    model = EncoderDecoderModel(tiny_config())
    batch = make_batch(np.random.default_rng(0), b=4, tlen=7)
    programs, rates = [], []
    for total, cooldown in STUDY_COOLDOWNS[:2]:
        schedule = learning_rate_schedule(1.0, 100, total_steps=total, cooldown_steps=cooldown)
        fns = single_device_step_functions(model, batch, schedule=schedule)
        programs.append(fns.step.lower(fns.abstract_state, batch).as_text())
        state = jax.device_put(fns.init(jax.random.PRNGKey(0)), fns.state_shardings)
        state["step"] = jax.numpy.int32(950)  # inside the second schedule's cool-down
        _, metrics = fns.step(state, batch)
        rates.append((float(metrics["learning_rate"]), float(jax.jit(schedule)(950))))
    assert programs[0] == programs[1]
    assert rates[0][0] == rates[0][1] and rates[1][0] == rates[1][1]
    assert rates[0][0] != rates[1][0]  # 950 is in the branch's cool-down, not the parent's
