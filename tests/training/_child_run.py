"""Child process of the trainer tests: run `train` from a JSON spec, optionally dying on a step.

    python _child_run.py SPEC.json

SPEC: {"config": TrainConfig fields, "vocab": path, "eval_size": int, "mixture": name,
       "kill_at": step or null, "kill_event": index or null, "signal": "KILL" | "TERM",
       "coordinator": ..., "process_id": ...}
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
                                                eval_size=spec["eval_size"])
    mixtures.register_weighted_mixture(spec["mixture"], {t: 0.5 for t in pair_tasks.values()})
    from mnmt.training.config import TrainConfig
    from mnmt.training.trainer import train

    config = TrainConfig.from_dict(spec["config"])
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

    summary = train(config, progress=progress)
    print(json.dumps({"status": summary.status, "final_step": summary.final_step,
                      "final_eval": summary.final_eval, "stop_signal": summary.stop_signal}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
