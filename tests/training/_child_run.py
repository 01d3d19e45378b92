"""Child process of the trainer tests: run `train` from a JSON spec, optionally dying on a step.

    python _child_run.py SPEC.json

SPEC: {"config": TrainConfig fields, "vocab": path, "eval_size": int, "mixture": name,
       "task_prefix": prefix of the registered task names (default "synth"),
       "kill_at": step or null, "kill_event": index or null, "signal": "KILL" | "TERM",
       "coordinator": ..., "process_id": ...,
       "group": [TrainConfig fields, ...] (instead of "config": `train_group` on them),
       "mixtures": {name: [weight en-de, weight en-zh]} (more mixtures to register),
       "caps": int or {pair: int} (capped, finite training splits; default: unlimited)}
With kill_at, the process sends itself the signal when the training progress event of that
step arrives; with kill_event, when its progress event number `kill_event` (0-based, any kind:
train, eval, checkpoint) arrives. SIGKILL: dies at once, as a preempted VM would; SIGTERM:
checkpoints and stops.
"""

import json
import os
import signal
import sys


def main() -> int:
    spec = json.load(open(sys.argv[1]))
    if spec.get("coordinator"):
        from mnmt.training import distributed

        distributed.initialize(spec["coordinator"], spec["num_processes"], spec["process_id"])
    from mnmt.data import mixtures, tasks

    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", spec["vocab"],
                                                eval_size=spec["eval_size"],
                                                prefix=spec.get("task_prefix", "synth"),
                                                caps=spec.get("caps"))
    mixtures.register_weighted_mixture(spec["mixture"], {t: 0.5 for t in pair_tasks.values()})
    for name, weights in spec.get("mixtures", {}).items():
        mixtures.register_weighted_mixture(
            name, {t: w for t, w in zip(pair_tasks.values(), weights, strict=True) if w > 0})
    from mnmt.training.config import TrainConfig
    from mnmt.training.trainer import train, train_group

    kill_at = spec.get("kill_at")
    kill_event = spec.get("kill_event")
    sig = signal.SIGKILL if spec.get("signal", "KILL") == "KILL" else signal.SIGTERM
    seen = [0]

    def progress(event):
        index, seen[0] = seen[0], seen[0] + 1
        if kill_at is not None and event.step >= kill_at and event.kind == "train":
            os.kill(os.getpid(), sig)
        if kill_event is not None and index == kill_event:
            os.kill(os.getpid(), sig)

    if "group" in spec:
        summaries = train_group([TrainConfig.from_dict(c) for c in spec["group"]],
                                progress=progress)
    else:
        summaries = [train(TrainConfig.from_dict(spec["config"]), progress=progress)]
    print(json.dumps([{"status": s.status, "final_step": s.final_step,
                       "final_eval": s.final_eval, "stop_signal": s.stop_signal}
                      for s in summaries]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
