"""Caillaut et al. 2024's "<eos> issue" (§3.3.1) at CPU scale: a decoder-only size trained with
masked packing (the default), unmasked packing (`InputConfig.mask_segments=False`) and unmasked
packing with the `<eos>` prefix (`InputConfig.prefix_eos=True`, their fix), on the synthetic
cpu-tiny pairs. Prints, per variant and seed, the final validation loss and greedy BLEU / ChrF
per pair (their Table 2 compares BLEU with and without the prefix).

    python benchmarks/studies/decoder_eos_issue.py --out /tmp/eos_issue --steps 1500 --seeds 0,1 --length 32
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

VARIANTS = {"masked": {}, "unmasked": {"mask_segments": False},
            "unmasked+prefix_eos": {"mask_segments": False, "prefix_eos": True}}


def _data(out: Path, eval_size: int) -> tuple[str, dict[str, str], str]:
    from mnmt.data import mixtures, synthetic, tasks, vocab

    path = vocab.train_vocabulary(synthetic.get_family("cpu-tiny"), str(out / "vocab"), 512,
                                  n_per_pair=2000, separator=True)
    pair_tasks = tasks.register_synthetic_tasks("cpu-tiny", path, eval_size=eval_size,
                                                prefix="eosx")
    mixture = mixtures.register_weighted_mixture("eosx_p50",
                                                 {t: 0.5 for t in pair_tasks.values()})
    return path, pair_tasks, mixture


def _final(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    last = max(r["step"] for r in rows)
    return {f"{r['metric']}/{r['task']}": round(r["value"], 4) for r in rows
            if r["step"] == last and r["eval_set"] == "validation"
            and r["metric"] in ("loss", "bleu", "chrf")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--length", type=int, default=32, help="inputs and targets feature length")
    ap.add_argument("--size", default="mini-dec-1")
    ap.add_argument("--eval_size", type=int, default=256)
    args = ap.parse_args()
    from mnmt.tensorflow_setup import start_tensorflow

    start_tensorflow()
    from mnmt.training.config import (
        CheckpointConfig,
        DecodeConfig,
        EvalConfig,
        InputConfig,
        TrainConfig,
    )
    from mnmt.training.trainer import train

    out = Path(args.out)
    path, pair_tasks, mixture = _data(out, args.eval_size)
    lengths = {"inputs": args.length, "targets": args.length}
    for seed in [int(s) for s in args.seeds.split(",")]:
        for name, options in VARIANTS.items():
            run_id = f"{name}_s{seed}"
            start = time.time()
            config = TrainConfig(
                model_dir=str(out / run_id), model_size=args.size, vocabulary_path=path,
                train_steps=args.steps,
                inputs=InputConfig(mixture_or_task_name=mixture, feature_lengths=lengths,
                                   batch_size=16, **options),
                eval=EvalConfig(tasks=dict(pair_tasks), period=args.steps, batch_size=64),
                decode=DecodeConfig(at_end=True, num_examples=args.eval_size, beam_size=1,
                                    alpha=0.0),
                checkpoint=CheckpointConfig(period=args.steps), log_every=100, warmup_steps=20,
                learning_rate=0.5, tensorboard=False, peak_flops=1e9, run_id=run_id, seed=seed)
            summary = train(config)
            print(json.dumps({"run": run_id, "status": summary.status,
                              "wall_s": round(time.time() - start), **_final(out / run_id)}),
                  flush=True)


if __name__ == "__main__":
    main()
