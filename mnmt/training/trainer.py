"""The training loop (T5X's trainer role): sharded steps, evaluation, checkpoints, run files.

`train(TrainConfig(...))` trains one model on one SeqIO mixture or task and writes the run
directory of docs/reference/metrics_schema.md. It resumes from the latest checkpoint of MODEL_DIR
(parameters, optimizer state, step, RNG key, input position, training-token count and the
running train-loss window), so a run killed at any step and restarted reaches the same metrics
as an uninterrupted one; it refuses to resume into a directory whose run.json describes another
run, and returns at once when the run has already finished.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import gin
import jax
import numpy as np

from mnmt.tensorflow_setup import start_tensorflow
from mnmt.training import checkpoints, distributed, evaluation, run_files
from mnmt.training.config import TrainConfig
from mnmt.training.host_inputs import gather_input_states
from mnmt.training.optimizer import make_optimizer, rsqrt_schedule
from mnmt.training.progress import (
    ProgressEvent,
    RateMeter,
    SummaryWriters,
    measure_matmul_peak,
    print_progress,
)
from mnmt.training.run_setup import RunSetup, build_setup, final_losses, final_metrics
from mnmt.training.step_functions import (
    build_step_functions,
    put_global_batch,
    put_replicated_batch,
)

log = logging.getLogger("mnmt.training.train")

__all__ = ["TrainSummary", "train"]


@dataclasses.dataclass
class TrainSummary:
    run_id: str
    model_dir: str
    status: str                        # finished | preempted | diverged
    final_step: int
    final_eval: dict[str, float]       # pair -> loss on the first eval set at the final step
    wall_s: float
    tokens: int = 0
    message: str = ""
    final_metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # "pair/set/metric"
    stop_signal: int | None = None     # preempted: the signal received here (None: another host's)


def train(config: TrainConfig, *,
          progress: Callable[[ProgressEvent], None] | None = None) -> TrainSummary:
    """Train (or resume, or skip a finished) run; see the module docstring."""
    t_start = time.perf_counter()
    start_tensorflow()  # SeqIO's backend: sees no GPU (JAX owns the accelerators), quiet start-up
    distributed.initialize()  # no-op unless this is a multi-process job
    progress = progress or print_progress
    setup = build_setup(config)
    primary = jax.process_index() == 0
    if setup.existing is not None and setup.existing.get("status") == "finished":
        finals = final_losses(config.model_dir, setup.first_eval_set)
        return TrainSummary(setup.run_id, config.model_dir, "finished",
                            int(setup.existing.get("final_step", config.train_steps)),
                            finals, time.perf_counter() - t_start,
                            tokens=int(setup.existing.get("final_tokens", 0)),
                            message="already finished",
                            final_metrics=final_metrics(config.model_dir))
    if primary:
        run_files.write_run_json(config.model_dir, setup.run_json)
    loop = _Loop(config, setup, progress, primary)
    try:
        return loop.run(t_start)
    finally:
        loop.close()


def _any_process(flag: bool) -> bool:
    """True when `flag` is set on any process (so all hosts stop and checkpoint together)."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils  # noqa: PLC0415

    return bool(np.any(multihost_utils.process_allgather(np.array([flag], np.bool_))))


class _Loop:
    def __init__(self, config: TrainConfig, setup: RunSetup, progress, primary: bool):
        self.config, self.setup, self.progress, self.primary = config, setup, progress, primary
        self.metrics = run_files.MetricsWriter(config.model_dir, setup.run_id, enabled=primary)
        self.tb = SummaryWriters(run_files.join(config.model_dir, "events"),
                                 enabled=primary and config.tensorboard)
        self.ckpt = checkpoints.Checkpointer(run_files.join(config.model_dir, "checkpoints"),
                                             keep=config.checkpoint.keep)
        self.schedule = rsqrt_schedule(config.learning_rate, config.warmup_steps, config.warmup)
        self.tx = make_optimizer(self.schedule, config.optimizer)

    def close(self) -> None:
        if getattr(self, "_inputs", None) is not None:
            self._inputs.close()
        self.tb.close()
        self.ckpt.close()

    # ------------------------------------------------------------------ evaluation
    def _eval_rows(self, state, step: int, tokens: int) -> dict[str, float]:
        c, s = self.config, self.setup
        # Every process takes the same decision (all read metrics.jsonl), so the collective
        # evaluation steps stay in lockstep across hosts.
        wanted = [(pair, es) for pair in c.eval.tasks for es in c.eval.sets
                  if not self.metrics.has(step, pair, es, "loss")]
        if not wanted:
            return {}
        losses = {}
        for pair, es in wanted:
            batches = s.eval_batches(c.eval.tasks[pair], es)
            loss, _ = evaluation.evaluate_loss(self.score_fn, state["params"], batches,
                                               self.put_eval)
            losses[(pair, es)] = loss
        rows = [dict(step=step, tokens=tokens, task=p, eval_set=e, metric="loss", value=v)
                for (p, e), v in losses.items()]
        self.metrics.write(rows)
        for es in c.eval.sets:
            self.tb.scalars("eval", step, {f"{es}/{p}/loss": v for (p, e), v in losses.items()
                                           if e == es})
        first = {p: v for (p, e), v in losses.items() if e == s.first_eval_set}
        self.progress(self._event(step, tokens, kind="eval", eval_losses={
            f"{p}/{e}" if len(c.eval.sets) > 1 else p: v for (p, e), v in losses.items()}))
        return first

    def _decode_rows(self, state, step: int, tokens: int) -> None:
        c, s = self.config, self.setup
        for pair, task in c.eval.tasks.items():
            for es in c.eval.sets:
                if self.metrics.has(step, pair, es, "bleu") and \
                        self.metrics.has(step, pair, es, "chrf"):
                    continue
                scores = evaluation.decode_and_score(
                    self.predict_fn, state["params"], s.eval_batches(task, es, with_targets=True),
                    self.put_eval,
                    s.vocabulary, pair, num_examples=c.decode.num_examples)
                base = dict(step=step, tokens=tokens, task=pair, eval_set=es)
                self.metrics.write([{**base, "metric": "bleu", "value": scores.bleu},
                                    {**base, "metric": "chrf", "value": scores.chrf}])
                self.tb.scalars("eval", step, {f"{es}/{pair}/bleu": scores.bleu,
                                               f"{es}/{pair}/chrf": scores.chrf})
                if scores.examples:
                    self.tb.text("eval", step, f"{es}/{pair}/examples", "\n\n".join(
                        f"src: {a}  \nhyp: {b}  \nref: {r}" for a, b, r in scores.examples))
                self.progress(self._event(step, tokens, kind="eval", eval_losses={
                    f"{pair}/{es}/bleu": scores.bleu, f"{pair}/{es}/chrf": scores.chrf}))

    # ------------------------------------------------------------------ helpers
    def _event(self, step, tokens, *, kind="train", loss=None, lr=None, rates=None,
               eval_losses=None, message="") -> ProgressEvent:
        """A progress event; eval/checkpoint events repeat the latest training figures."""
        if kind == "train":
            self._last_train = (loss, lr, rates)
        else:
            loss, lr, rates = getattr(self, "_last_train", (None, None, None))
        sps, tps, mfu, eta = rates or (None, None, None, None)
        return ProgressEvent(run_id=self.setup.run_id, step=step, total_steps=self.config.train_steps,
                             loss=loss, learning_rate=lr, steps_per_s=sps, tokens_per_s=tps,
                             mfu=mfu, eta_s=eta, tokens=tokens,
                             elapsed_s=time.perf_counter() - self.t_start, kind=kind,
                             eval_losses=eval_losses, message=message)

    def _save(self, state, step: int, tokens: int, window, input_state) -> None:
        meta = {"step": step, "tokens": tokens, "train_loss_window": list(window),
                "inputs": input_state}
        if self.ckpt.save(step, state, meta):
            self.progress(self._event(step, tokens, kind="checkpoint",
                                      message=f"checkpoint saved ({self.ckpt.directory})"))

    def _status_json(self, status: str, step: int, tokens: int, finals: dict, message=""):
        if not self.primary:
            return
        run = dict(self.setup.run_json)
        run.update(status=status, final_step=step, final_tokens=tokens,
                   gin_config=gin.operative_config_str() or run.get("gin_config", ""))
        if finals:
            run["final_eval"] = finals
        if message:
            run["message"] = message
        run_files.write_run_json(self.config.model_dir, run)

    # ------------------------------------------------------------------ main loop
    def run(self, t_start: float) -> TrainSummary:
        c, s = self.config, self.setup
        self.t_start = t_start
        fns = build_step_functions(
            s.model, self.tx, self.schedule, s.mesh, s.params_shardings_fn, s.example_batch,
            label_smoothing=c.label_smoothing, z_loss=c.z_loss,
            accumulation_steps=c.gradient_accumulation_steps, context=s.context)
        self.fns = fns
        self.put_eval = lambda b: put_replicated_batch(b, fns.batch_sharding)
        # Outputs are replicated so every process can read them (multi-host evaluation).
        score = jax.jit(s.model.score_batch, out_shardings=fns.replicated)
        gather = jax.jit(lambda x: x, out_shardings=fns.replicated)
        max_len = c.decode.max_length or c.inputs.feature_lengths["targets"]

        def score_fn(p, b):
            with s.context():
                return score(p, b)

        def predict_fn(p, b):
            with s.context():  # predict_batch is jitted inside the model
                return gather(s.model.predict_batch(p, b, beam_size=c.decode.beam_size,
                                                    alpha=c.decode.alpha,
                                                    max_decode_length=max_len))

        self.score_fn, self.predict_fn = score_fn, predict_fn

        inputs = s.make_inputs()
        self._inputs = inputs
        latest = self.ckpt.latest_step()
        window = [0.0, 0]  # running train-loss sum and count since the last train_loss row
        if latest is not None:
            state, meta = self.ckpt.restore(latest, fns.abstract_state)
            step, tokens = int(meta["step"]), int(meta["tokens"])
            window = [float(meta["train_loss_window"][0]), int(meta["train_loss_window"][1])]
            inputs.set_state(meta["inputs"])
            self.progress(self._event(step, tokens, kind="checkpoint",
                                      message=f"resumed from checkpoint at step {step}"))
        else:
            state = fns.init(jax.random.PRNGKey(c.seed))
            step, tokens = 0, 0

        peak = c.peak_flops or measure_matmul_peak()
        meter = RateMeter(step, tokens, c.train_steps, s.flops_per_step, peak)
        status, message, finals = "finished", "", {}
        first_step = step
        with checkpoints.PreemptionGuard() as guard:
            input_state = inputs.get_state()  # this process's position after `step` batches
            batch = next(inputs) if step < c.train_steps else None
            while step < c.train_steps:
                state, m = fns.step(state, put_global_batch(batch, fns.batch_sharding,
                                                            s.global_rows))
                step += 1
                next_state = inputs.get_state()
                batch = next(inputs) if step < c.train_steps else None  # overlaps the step
                m = jax.device_get(m)
                if not bool(m["finite"]):
                    status = "diverged"
                    message = (f"non-finite training loss ({float(m['loss'])}) or gradient norm "
                               f"({float(m['grad_norm'])}) at step {step}; stopped. The last "
                               f"good checkpoint is step {self.ckpt.latest_step()} in "
                               f"{self.ckpt.directory}.")
                    log.error(message)
                    self.progress(self._event(step, tokens, kind="done", message=message))
                    break
                tokens += int(m["num_tokens"])
                input_state = next_state
                if step == first_step + 1:  # exclude compilation from steps/s, MFU and ETA
                    meter.reset(step, tokens)
                window[0] += float(m["loss"])
                window[1] += 1
                if step % c.log_every == 0 or step == c.train_steps:
                    self._log_train(step, tokens, m, window, meter)
                    window = [0.0, 0]
                is_eval = step % c.eval.period == 0 or step == c.train_steps
                if is_eval:
                    finals = self._eval_rows(state, step, tokens) or finals
                if step in c.decode.steps or (step == c.train_steps and c.decode.at_end):
                    self._decode_rows(state, step, tokens)
                stop = _any_process(guard.requested)
                if step % c.checkpoint.period == 0 or step == c.train_steps or stop:
                    self._save(state, step, tokens, window, gather_input_states(input_state))
                if is_eval:
                    meter.restart_window()
                if stop and step < c.train_steps:
                    status = "preempted"
                    message = (f"stopped by signal {guard.signal_received or '(on another host)'}"
                               f" at step {step}; checkpoint saved, run again to resume")
                    self.progress(self._event(step, tokens, kind="done", message=message))
                    break
            if status == "finished":
                # Resumed after the last step was checkpointed but before all final rows
                # were written: write whatever is missing (the writer skips existing rows).
                finals = self._eval_rows(state, step, tokens) or finals
                if c.decode.at_end:
                    self._decode_rows(state, step, tokens)
                finals = final_losses(c.model_dir, s.first_eval_set) if self.primary else finals
        self.tb.flush()
        if status == "finished":
            self._status_json("finished", step, tokens, finals)
            self.progress(self._event(step, tokens, kind="done", message="finished"))
        elif status == "diverged":
            self._status_json("diverged", step, tokens, {}, message)
        return TrainSummary(s.run_id, c.model_dir, status, step, finals,
                            time.perf_counter() - t_start, tokens=tokens, message=message,
                            final_metrics=final_metrics(c.model_dir) if self.primary else {},
                            stop_signal=guard.signal_received if status == "preempted" else None)

    def _log_train(self, step, tokens, m, window, meter) -> None:
        mean_loss = window[0] / max(window[1], 1)
        lr = float(m["learning_rate"])
        base = dict(step=step, tokens=tokens, task="all", eval_set="train")
        self.metrics.write([{**base, "metric": "train_loss", "value": mean_loss},
                            {**base, "metric": "learning_rate", "value": lr}])
        rates = meter.report(step, tokens)
        self.tb.scalars("train", step, {
            "loss": mean_loss, "learning_rate": lr, "cross_entropy": float(m["cross_entropy"]),
            "grad_norm": float(m["grad_norm"]), "steps_per_s": rates[0],
            "tokens_per_s": rates[1], "mfu": rates[2]})
        self.progress(self._event(step, tokens, loss=mean_loss, lr=lr, rates=rates))

