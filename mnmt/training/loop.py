"""The training loop of one group of runs: sharded steps, evaluation, checkpoints, run files.

`GroupLoop(configs, setups, progress, primary).run(t_start)` trains the runs of one group (one
run, or several that differ only in their data mixture, seed and identity, as one compiled
program with a leading run axis) from their latest common checkpoint step, or fresh, to
`train_steps`: it evaluates (and probes: `probe_loss` on each pair's fixed probe set every
`EvalConfig.probe_every` steps), decodes, checkpoints (the branch points and `keep_steps` kept),
writes metrics.jsonl, TensorBoard and W&B, stops every member together on a preemption signal
and marks the members whose loss went non-finite. Which runs form a group, run.json before the
start and the cool-down branches after it are `mnmt.training.trainer`'s job.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import gin
import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from fitting.data.schema import PROBE_METRIC
from mnmt.training import branches, checkpoints, evaluation, run_files, tracking
from mnmt.training.config import TrainConfig
from mnmt.training.fault_injection import nan_injection, poisoned
from mnmt.training.host_inputs import gather_input_states
from mnmt.training.loss_window import LossWindow
from mnmt.training.optimizer import make_optimizer, schedule_for
from mnmt.training.progress import ProgressEvent, RateMeter, SummaryWriters, measure_matmul_peak
from mnmt.training.run_setup import RunSetup, final_losses, final_metrics, pair_names
from mnmt.training.step_functions import (
    build_step_functions,
    member_slice,
    put_global_batch,
    put_replicated_batch,
    stack_members,
)

log = logging.getLogger("mnmt.training.train")

__all__ = ["GroupLoop", "TrainSummary", "checkpoint_dir", "stop_at", "COMPLETE_STATUSES",
           "PLANNED_LR_METRIC"]

#: a run that reached the step it was asked to train to: its end, or its early stop
COMPLETE_STATUSES = ("finished", "stopped")
#: metrics.jsonl rows of a stopped run: the learning rate each remaining log step will have
PLANNED_LR_METRIC = "planned_learning_rate"


@dataclasses.dataclass
class TrainSummary:
    """What one run's training came to (returned by `train`, `train_group` and `GroupLoop.run`)."""

    run_id: str
    model_dir: str
    status: str                        # finished | stopped (early) | preempted | diverged
    final_step: int
    final_eval: dict[str, float]       # pair -> loss on the first eval set at the final step
    wall_s: float
    tokens: int = 0
    message: str = ""
    final_metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # "pair/set/metric"
    stop_signal: int | None = None     # preempted: the signal received here (None: another host's)
    branches: list[TrainSummary] = dataclasses.field(default_factory=list)  # its cool-down branches
    probe_s: float = 0.0               # seconds its group spent in probe evaluations (in wall_s)


def checkpoint_dir(model_dir: str) -> str:
    """Where the checkpoints of the run in `model_dir` are kept."""
    return run_files.join(model_dir, "checkpoints")


def stop_at(config: TrainConfig) -> int:
    """The last step this config trains: `stop_step` when 0 < stop_step < train_steps, else
    `train_steps` (the schedule is that of `train_steps` either way)."""
    return config.stop_step if 0 < config.stop_step < config.train_steps else config.train_steps


def _kept_steps(config: TrainConfig) -> tuple[int, ...]:
    """Checkpoint steps saved and never deleted: `checkpoint.keep_steps` and the branch points."""
    return tuple(sorted({*config.checkpoint.keep_steps, *branches.branch_steps(config)}))


def _barrier() -> None:
    """Wait until every process of a multi-host job gets here."""
    from jax.experimental import multihost_utils  # noqa: PLC0415

    multihost_utils.sync_global_devices("mnmt checkpoint set aside")


def _any_process(flag: bool) -> bool:
    """True when `flag` is set on any process (so all hosts stop and checkpoint together)."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils  # noqa: PLC0415

    return bool(np.any(multihost_utils.process_allgather(np.array([flag], np.bool_))))


@dataclasses.dataclass
class _Member:
    """One run of a group: its files, inputs and running totals."""

    config: TrainConfig
    setup: RunSetup
    metrics: run_files.MetricsWriter
    tb: SummaryWriters
    ckpt: checkpoints.Checkpointer
    inputs: Any = None
    tokens: int = 0
    window: LossWindow = dataclasses.field(default_factory=LossWindow)  # train_loss rows
    pairs: list = dataclasses.field(default_factory=list)  # pair of task id k + 1 in batches
    finals: dict = dataclasses.field(default_factory=dict)
    status: str = "finished"
    message: str = ""
    last_train: tuple = (None, None, None)  # loss, learning rate, rates of the last train event
    wandb: tracking.WandbRun = dataclasses.field(default_factory=tracking.WandbRun)

    def scalars(self, name: str, step: int, values: dict, *, new_rows: bool) -> None:
        """TensorBoard scalars `name/<tag>`; also to W&B when they come with `new_rows` in
        metrics.jsonl (a resumed run does not log the steps it trains again)."""
        self.tb.scalars(name, step, values)
        if new_rows:
            self.wandb.log(step, {f"{name}/{tag}": v for tag, v in values.items()})


class GroupLoop:
    """Trains one group of runs (see the module docstring); `run` once, then `close`."""

    def __init__(self, configs: list[TrainConfig], setups: list[RunSetup], progress,
                 primary: bool):
        self.config, self.setup = configs[0], setups[0]  # the settings all members share
        self.progress, self.primary = progress, primary
        metrics = [run_files.MetricsWriter(c.model_dir, s.run_id, enabled=primary)
                   for c, s in zip(configs, setups, strict=True)]  # before anything is written
        self.members = [
            _Member(config=c, setup=s, metrics=w,
                    tb=SummaryWriters(run_files.join(c.model_dir, "events"),
                                      enabled=primary and c.tensorboard),
                    ckpt=checkpoints.Checkpointer(checkpoint_dir(c.model_dir), keep=c.checkpoint.keep,
                                                  keep_steps=_kept_steps(c)))
            for c, s, w in zip(configs, setups, metrics, strict=True)]
        for m in self.members:
            m.wandb = tracking.start_wandb(m.config, m.setup.run_id, primary=primary)
        self.profiler = tracking.Profiler(  # a cool-down branch repeats no trace of its parent
            None if branches.is_branch(self.config) else self.config.tracking.profile_steps,
            run_files.join(self.config.model_dir, "events"))
        self.kept_steps = set(_kept_steps(self.config))  # saved whatever the period
        self.grouped = len(self.members) > 1
        self.schedule = schedule_for(self.config)
        self.tx = make_optimizer(self.schedule, self.config.optimizer)
        self._probes: dict[str, list] | None = None  # pair -> its probe batches, on the mesh
        self.probe_s = 0.0  # seconds spent in probe evaluations (set-up included)

    def close(self) -> None:
        self.profiler.close()
        for m in self.members:
            m.wandb.finish("error")  # no-op once _finish marked its end
            if m.inputs is not None:
                m.inputs.close()
            m.tb.close()
            m.ckpt.close()

    def _of_member(self, tree, index: int):
        """Member `index`'s part of a state or metrics tree (the tree itself for one run)."""
        return member_slice(tree, index) if self.grouped else tree

    # ------------------------------------------------------------------ evaluation
    def _eval_rows(self, state, step: int) -> None:
        """Loss rows of every member still missing them at `step`; updates `member.finals`.

        A group's members are scored together on each eval batch (one program per batch)."""
        c, s = self.config, self.setup
        # Every process takes the same decision (all read metrics.jsonl), so the collective
        # evaluation steps stay in lockstep across hosts.
        wanted = sorted({(pair, es) for m in self.members for pair in c.eval.tasks
                         for es in c.eval.sets if not m.metrics.has(step, pair, es, "loss")})
        if not wanted:
            return
        losses = {}  # (pair, eval set) -> loss of each member
        for pair, es in wanted:
            batches = s.eval_batches(c.eval.tasks[pair], es)
            values, _ = evaluation.evaluate_group_loss(self.score_fn, state["params"], batches,
                                                       self.put_eval)
            losses[(pair, es)] = np.atleast_1d(values)
        for i, m in enumerate(self.members):
            mine = {key: float(v[i]) for key, v in losses.items()}
            new = m.metrics.write([dict(step=step, tokens=m.tokens, task=p, eval_set=e,
                                        metric="loss", value=v) for (p, e), v in mine.items()])
            for es in c.eval.sets:
                m.scalars("eval", step, {f"{es}/{p}/loss": v for (p, e), v in mine.items()
                                         if e == es}, new_rows=new > 0)
            first = {p: v for (p, e), v in mine.items() if e == s.first_eval_set}
            m.finals = first or m.finals
            self.progress(self._event(m, step, kind="eval", eval_losses={
                f"{p}/{e}" if len(c.eval.sets) > 1 else p: v for (p, e), v in mine.items()}))

    def _probe_due(self, step: int) -> bool:
        """Whether `step` is a probe step: a multiple of `eval.probe_every`, the last step, or
        the early stop (`stop_at`: a stopped run's curve ends with a probe, as its loss rows do)."""
        every = self.config.eval.probe_every
        return every > 0 and (step % every == 0 or step in (self.config.train_steps,
                                                             stop_at(self.config)))

    def _probe_sets(self) -> dict[str, list]:
        """pair -> its probe batches (`evaluation.probe_batches` of its first eval set), placed
        on the mesh on first use and kept there for the rest of the run."""
        if self._probes is None:
            c, s = self.config, self.setup
            self._probes = {
                pair: [self.put_eval(b) for b in evaluation.probe_batches(
                    s.eval_batches(task, s.first_eval_set), c.eval.probe_examples)]
                for pair, task in c.eval.tasks.items()}
        return self._probes

    def _probe_rows(self, state, step: int) -> None:
        """`probe_loss` rows (eval set: the first one) of every member still missing them at
        `step`, and TensorBoard `eval` scalars `<set>/<pair>/probe_loss`: each pair's probe set
        scored like an eval set, the group's members together on each batch."""
        es = self.setup.first_eval_set
        pairs = [p for p in self.config.eval.tasks
                 if any(not m.metrics.has(step, p, es, PROBE_METRIC) for m in self.members)]
        if not pairs:
            return
        start = time.perf_counter()
        probes = self._probe_sets()
        losses = {p: np.atleast_1d(evaluation.evaluate_group_loss(
            self.score_fn, state["params"], probes[p], lambda b: b)[0]) for p in pairs}
        self.probe_s += time.perf_counter() - start
        for i, m in enumerate(self.members):
            mine = {p: float(v[i]) for p, v in losses.items()}
            new = m.metrics.write([dict(step=step, tokens=m.tokens, task=p, eval_set=es,
                                        metric=PROBE_METRIC, value=v) for p, v in mine.items()])
            m.scalars("eval", step, {f"{es}/{p}/{PROBE_METRIC}": v for p, v in mine.items()},
                      new_rows=new > 0)

    def _decode_rows(self, m: _Member, params, step: int) -> None:
        c, s = m.config, m.setup
        for pair, task in c.eval.tasks.items():
            for es in c.eval.sets:
                if m.metrics.has(step, pair, es, "bleu") and m.metrics.has(step, pair, es, "chrf"):
                    continue
                # a list, so the decode knows its total (progress lines of a long split), when
                # it is in memory anyway or all of it is decoded; otherwise read only as far as
                # num_examples (an uncached split is not built whole for 64 sentences)
                batches = s.eval_batches(task, es, with_targets=True)
                if c.eval.cache_batches or c.decode.num_examples == evaluation.ALL_EXAMPLES:
                    batches = list(batches)
                report = evaluation.DecodeProgress(
                    lambda line: self.progress(self._event(m, step, kind="decode",
                                                           message=line)),
                    None, label=f"decoding {pair}/{es}")
                scores = evaluation.decode_and_score(
                    self.predict_fn, params, batches, self.put_decode, s.vocabulary, pair,
                    num_examples=c.decode.num_examples, progress=report.update)
                report.finish()
                base = dict(step=step, tokens=m.tokens, task=pair, eval_set=es)
                new = m.metrics.write([{**base, "metric": "bleu", "value": scores.bleu},
                                       {**base, "metric": "chrf", "value": scores.chrf}])
                m.scalars("eval", step, {f"{es}/{pair}/bleu": scores.bleu,
                                         f"{es}/{pair}/chrf": scores.chrf}, new_rows=new > 0)
                if scores.examples:
                    m.tb.text("eval", step, f"{es}/{pair}/examples", "\n\n".join(
                        f"src: {a}  \nhyp: {b}  \nref: {r}" for a, b, r in scores.examples))
                self.progress(self._event(m, step, kind="eval", eval_losses={
                    f"{pair}/{es}/bleu": scores.bleu, f"{pair}/{es}/chrf": scores.chrf}))

    # ------------------------------------------------------------------ helpers
    def _event(self, m: _Member, step, *, kind="train", loss=None, lr=None, rates=None,
               eval_losses=None, message="") -> ProgressEvent:
        """A progress event; eval/checkpoint events repeat the latest training figures."""
        if kind == "train":
            m.last_train = (loss, lr, rates)
        else:
            loss, lr, rates = m.last_train
        sps, tps, mfu, eta = rates or (None, None, None, None)
        return ProgressEvent(run_id=m.setup.run_id, step=step, total_steps=self.config.train_steps,
                             loss=loss, learning_rate=lr, steps_per_s=sps, tokens_per_s=tps,
                             mfu=mfu, eta_s=eta, tokens=m.tokens,
                             elapsed_s=time.perf_counter() - self.t_start, kind=kind,
                             eval_losses=eval_losses, message=message)

    def _save(self, state, step: int, input_states) -> None:
        for i, m in enumerate(self.members):
            meta = {"step": step, "tokens": m.tokens, "train_loss_window": m.window.state(),
                    "inputs": gather_input_states(input_states[i])}
            if m.ckpt.save(step, self._of_member(state, i), meta):
                self.progress(self._event(m, step, kind="checkpoint",
                                          message=f"checkpoint saved ({m.ckpt.directory})"))

    def _status_json(self, m: _Member, status: str, step: int, finals: dict, message=""):
        if not self.primary:
            return
        run = dict(m.setup.run_json)
        run.update(status=status, final_step=step, final_tokens=m.tokens,
                   gin_config=gin.operative_config_str() or run.get("gin_config", ""))
        if finals:
            run["final_eval"] = finals
        if message:
            run["message"] = message
        run_files.write_run_json(m.config.model_dir, run)

    def _build_functions(self):
        c, s = self.config, self.setup
        fns = build_step_functions(
            s.model, self.tx, self.schedule, s.mesh, s.params_shardings_fn, s.example_batch,
            label_smoothing=c.label_smoothing, z_loss=c.z_loss,
            accumulation_steps=c.gradient_accumulation_steps, context=s.context,
            group_size=len(self.members) if self.grouped else 0, loss_tiles=c.loss_tiles,
            num_pairs=max(len(m.pairs) for m in self.members))
        self.fns = fns
        eval_sharding = NamedSharding(fns.mesh, P("data"))  # one run's rows over `data`
        self.put_eval = lambda b: put_replicated_batch(b, eval_sharding)
        # Outputs are replicated so every process can read them (multi-host evaluation).
        if self.grouped:  # all members on one eval batch, one after another in one program
            score = jax.jit(lambda params, batch: jax.lax.map(
                lambda p: s.model.score_batch(p, batch), params), out_shardings=fns.replicated)
        else:
            score = jax.jit(s.model.score_batch, out_shardings=fns.replicated)
        gather = jax.jit(lambda x: x, out_shardings=fns.replicated)
        max_len = c.decode.max_length or c.inputs.feature_lengths["targets"]

        def score_fn(p, b):
            with s.context():
                return score(p, b)

        eos = int(getattr(s.vocabulary, "eos_id", 1))
        width = int(c.inputs.feature_lengths["inputs"])  # decoder-only prompts fit in `inputs`

        def predict_encoder_decoder(p, b):
            with s.context():  # predict_batch is jitted inside the model
                return gather(s.model.predict_batch(p, b, beam_size=c.decode.beam_size,
                                                    alpha=c.decode.alpha,
                                                    max_decode_length=max_len))

        def predict_decoder_only(p, b):  # b: the host batch (put_decode keeps it as it is)
            prompts = evaluation.decoder_prompts(b, width, eos_id=eos)
            with s.context():  # the prompted search is jitted inside the model
                return s.model.predict_batch(p, prompts, beam_size=c.decode.beam_size,
                                             alpha=c.decode.alpha, max_decode_length=max_len,
                                             eos_id=eos)

        if s.model_config.is_decoder_only:
            # The prompts are cut from the host batch's rows, so decoding takes it unplaced.
            predict_fn, self.put_decode = predict_decoder_only, (lambda b: b)
        else:
            predict_fn, self.put_decode = predict_encoder_decoder, self.put_eval
        self.score_fn, self.predict_fn = score_fn, predict_fn
        return fns

    def _restore_or_init(self, fns):
        """(state, step): every member from its checkpoint at the group's step, or fresh.

        An unreadable latest checkpoint is set aside and the group resumes from the newest
        older step that restores (`checkpoints.restore_latest`, which logs a warning); rows
        already in metrics.jsonl for the steps trained again are not written twice."""
        restored = checkpoints.restore_latest(
            [m.ckpt for m in self.members], fns.member_abstract_state,
            agree=lambda ok: not _any_process(not ok), primary=self.primary,
            barrier=_barrier if jax.process_count() > 1 else None)
        latest = restored.step
        if latest is None and branches.is_branch(self.config):
            restored = self._restore_parents(fns)
            latest = restored.step
        if latest is None:
            if self.grouped:
                keys = np.stack([np.asarray(jax.random.PRNGKey(m.config.seed))
                                 for m in self.members])
                return fns.init(keys), 0
            return fns.init(jax.random.PRNGKey(self.config.seed)), 0
        states = []
        for i, text in restored.warnings:
            self.progress(self._event(self.members[i], latest, kind="checkpoint", message=text))
        for m, (state, meta) in zip(self.members, restored.items, strict=True):
            states.append(state)
            m.tokens = int(meta["tokens"])
            m.window = LossWindow.from_state(meta["train_loss_window"])
            m.inputs.set_state(meta["inputs"])
            self.progress(self._event(m, latest, kind="checkpoint",
                                      message=f"resumed from checkpoint at step {latest}"))
        state = stack_members(states, fns.state_shardings) if self.grouped else states[0]
        return state, int(latest)

    def _restore_parents(self, fns) -> checkpoints.Restored:
        """A branch group's first start: every member from its parent's checkpoint at the
        branch step (`BranchConfig.parent_step`); ValueError naming it when it is missing."""
        step = self.config.branches.parent_step
        items = []
        for m in self.members:
            parent = checkpoint_dir(m.config.branches.parent_dir)
            source = checkpoints.Checkpointer(parent)
            try:
                if step not in source.all_steps():
                    raise checkpoints.CheckpointRestoreError(
                        f"branch {m.setup.run_id} starts from checkpoint step {step} of its "
                        f"parent, which {parent} does not hold (it has {source.all_steps()}); "
                        "train the parent with these BranchConfig.points first (it keeps "
                        "the branch points' checkpoints)")
                items.append(source.restore(step, fns.member_abstract_state))
            finally:
                source.close()
        return checkpoints.Restored(step, items, [])

    # ------------------------------------------------------------------ main loop
    def run(self, t_start: float) -> list[TrainSummary]:
        c, s = self.config, self.setup
        self.t_start = t_start
        for m in self.members:  # first: the step sums the loss of each of their pairs
            m.inputs = m.setup.make_inputs()
            m.pairs = pair_names(m.config, m.inputs.tasks)
        fns = self._build_functions()
        state, step = self._restore_or_init(fns)
        total = c.train_steps
        end = stop_at(c)  # the early stop (TrainConfig.stop_step), else total
        k = len(self.members)
        peak = c.peak_flops or measure_matmul_peak()
        meter = RateMeter(step, self._tokens(), total, s.flops_per_step * k, peak)
        first_step = step
        signal_received = None
        nan_at, nan_runs = nan_injection()
        with checkpoints.PreemptionGuard() as guard:
            input_states = [m.inputs.get_state() for m in self.members]  # after `step` batches
            batches = [next(m.inputs) for m in self.members] if step < end else None
            while step < end:
                if step + 1 == nan_at:  # test-only: see NAN_AT_STEP_ENV
                    state = self._poison(state, nan_runs)
                batch = _stack_batches(batches) if self.grouped else batches[0]
                self.profiler.before_step(step + 1)
                state, metrics = fns.step(state, put_global_batch(
                    batch, fns.batch_sharding, s.global_rows, group_size=fns.group_size))
                step += 1
                next_states = [m.inputs.get_state() for m in self.members]
                batches = [next(m.inputs) for m in self.members] if step < end else None
                metrics = jax.device_get(metrics)  # overlapped with the next batch above
                self.profiler.after_step(step, state)
                if self._diverged(metrics, step):
                    break
                for i, m in enumerate(self.members):
                    mm = self._of_member(metrics, i)
                    m.tokens += int(mm["num_tokens"])
                    m.window.add(mm, m.pairs)
                input_states = next_states
                if step == first_step + 1:  # exclude compilation from steps/s, MFU and ETA
                    meter.reset(step, self._tokens())
                if step % c.log_every == 0 or step == total:
                    rates = meter.report(step, self._tokens())
                    for i, m in enumerate(self.members):
                        self._log_train(m, step, self._of_member(metrics, i), rates)
                is_eval = step % c.eval.period == 0 or step in (total, end)
                if is_eval:
                    self._eval_rows(state, step)
                probed = self._probe_due(step)
                if probed:
                    self._probe_rows(state, step)
                if step in c.decode.steps or (step == total and c.decode.at_end):
                    for i, m in enumerate(self.members):
                        self._decode_rows(m, self._of_member(state, i)["params"], step)
                stop = _any_process(guard.requested)
                if (step % c.checkpoint.period == 0 or step in (total, end) or stop
                        or step in self.kept_steps):
                    self._save(state, step, input_states)
                if is_eval or probed:
                    meter.restart_window()
                if stop and step < end:
                    signal_received = guard.signal_received
                    for m in self.members:
                        m.status = "preempted"
                        m.message = (f"stopped by signal {signal_received or '(on another host)'}"
                                     f" at step {step}; checkpoint saved, run again to resume")
                        self.progress(self._event(m, step, kind="done", message=m.message))
                    break
            if step >= total and all(m.status == "finished" for m in self.members):
                # Resumed after the last step was checkpointed but before all final rows
                # were written: write whatever is missing (the writer skips existing rows).
                self._eval_rows(state, step)
                if self._probe_due(step):
                    self._probe_rows(state, step)
                for i, m in enumerate(self.members):
                    if c.decode.at_end:
                        self._decode_rows(m, self._of_member(state, i)["params"], step)
                    if self.primary:
                        m.finals = final_losses(m.config.model_dir, m.setup.first_eval_set)
            elif step >= end and all(m.status == "finished" for m in self.members):
                self._eval_rows(state, step)  # a resume after the stop's checkpoint
                if self._probe_due(step):
                    self._probe_rows(state, step)
                for m in self.members:
                    self._planned_rows(m, step)
                    m.status = "stopped"
        return [self._finish(m, step, signal_received) for m in self.members]

    def _finish(self, m: _Member, step: int, signal_received) -> TrainSummary:
        m.tb.flush()
        m.wandb.finish(m.status)
        if m.status in COMPLETE_STATUSES:
            self._status_json(m, m.status, step, m.finals)
            self.progress(self._event(m, step, kind="done", message=m.status if m.status ==
                                      "finished" else f"stopped early at step {step} of "
                                      f"{m.config.train_steps}"))
        elif m.status == "diverged":
            self._status_json(m, "diverged", step, {}, m.message)
        return TrainSummary(
            m.setup.run_id, m.config.model_dir, m.status, step, m.finals,
            time.perf_counter() - self.t_start, tokens=m.tokens, message=m.message,
            final_metrics=final_metrics(m.config.model_dir) if self.primary else {},
            stop_signal=signal_received if m.status == "preempted" else None,
            probe_s=self.probe_s)

    def _planned_rows(self, m: _Member, step: int) -> None:
        """`PLANNED_LR_METRIC` rows of a run stopped at `step`: the rate the `learning_rate` row
        of each later log step (and of the last) would carry — schedule(s − 1), as logged —
        so that a curve law can predict the rest of the run (tokens: those trained so far)."""
        c = m.config
        steps = [s for s in range(step + 1, c.train_steps + 1)
                 if s % c.log_every == 0 or s == c.train_steps]
        rates = np.asarray(jax.device_get(self.schedule(np.asarray(steps) - 1)), dtype=float)
        m.metrics.write([dict(step=s, tokens=m.tokens, task="all", eval_set="train",
                              metric=PLANNED_LR_METRIC, value=float(v))
                         for s, v in zip(steps, rates, strict=True)])

    def _poison(self, state, runs: set[str] | None):
        """`state` with the parameters of `runs` (None: every member) multiplied by NaN."""
        return poisoned(state, [m.setup.run_id for m in self.members], runs,
                        grouped=self.grouped, shardings=self.fns.state_shardings["params"])

    def _tokens(self) -> int:
        return sum(m.tokens for m in self.members)

    def _diverged(self, metrics, step: int) -> bool:
        """Mark the members whose loss or gradient went non-finite; the others stop unfinished."""
        finite = np.atleast_1d(np.asarray(metrics["finite"]))
        if bool(finite.all()):
            return False
        losses = np.atleast_1d(np.asarray(metrics["loss"]))
        norms = np.atleast_1d(np.asarray(metrics["grad_norm"]))
        bad = [m.setup.run_id for m, ok in zip(self.members, finite, strict=True) if not ok]
        for m, ok, loss, norm in zip(self.members, finite, losses, norms, strict=True):
            if ok:
                m.status = "preempted"
                m.message = (f"stopped at step {step - 1}: run {bad[0]} of its group diverged; "
                             "run again to resume")
                continue
            m.status = "diverged"
            last = m.ckpt.latest_step()
            where = (f"The last good checkpoint is step {last} in {m.ckpt.directory}."
                     if last is not None else
                     f"No checkpoint was saved yet ({m.ckpt.directory}): a re-run starts from "
                     "step 0.")
            m.message = (f"non-finite training loss ({float(loss)}) or gradient norm "
                         f"({float(norm)}) at step {step}; stopped. {where}")
            log.error(m.message)
            self.progress(self._event(m, step, kind="done", message=m.message))
        return True

    def _log_train(self, m: _Member, step: int, metrics, rates) -> None:
        """`train_loss` rows of the window (all, and each pair that had tokens, see
        `mnmt.training.loss_window`) and the `learning_rate` row; TensorBoard, W&B, progress."""
        means = m.window.means()
        m.window = LossWindow()
        lr = float(metrics["learning_rate"])
        base = dict(step=step, tokens=m.tokens, eval_set="train")
        new = m.metrics.write(
            [{**base, "task": task, "metric": "train_loss", "value": v}
             for task, v in means.items()]
            + [{**base, "task": "all", "metric": "learning_rate", "value": lr}])
        per_pair = {f"{p}/loss": v for p, v in means.items() if p != "all"}
        m.scalars("train", step, {
            "loss": means["all"], **per_pair, "learning_rate": lr,
            "objective": float(metrics["loss"]), "cross_entropy": float(metrics["cross_entropy"]),
            "grad_norm": float(metrics["grad_norm"]), "steps_per_s": rates[0],
            "tokens_per_s": rates[1], "mfu": rates[2]}, new_rows=new > 0)
        self.progress(self._event(m, step, loss=means["all"], lr=lr, rates=rates))


def _stack_batches(batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-run batches -> one batch with a leading run axis (feature names as in T5X)."""
    return {k: np.stack([b[k] for b in batches]) for k in batches[0]}
