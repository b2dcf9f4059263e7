"""How long one evaluation of the chained-addition study takes (ValidationCallback's generate: 450 problems x 16
sampled answers + a greedy pass), on the cached warm-started policy of a plan seed. Usage::

    OMP_NUM_THREADS=1 python benchmarks/eval_speed.py [--plan recipes/ablations/chain-calibration.yaml]
        [--seed 200] [--repeats 3] [--profile] [--batch-size 64] [--lean-only]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", default="recipes/ablations/chain-calibration.yaml")
    parser.add_argument("--seed", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per generate / decode call")
    parser.add_argument("--lean-only", action="store_true", help="time the lean loop only")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from trl_loo_gspo.demo.policy import PolicySpec, load_or_build_policy
    from trl_loo_gspo.experiment.ablation import AblationPlan
    from trl_loo_gspo.experiment.ablation.plan import demo_task

    plan = AblationPlan.from_yaml(args.plan)
    task, verifier = demo_task(plan, args.seed)
    model, tokenizer, info = load_or_build_policy(PolicySpec(task=task, seed=args.seed, **plan.policy), log=print)
    split = task.tuning_split() if plan.eval_split == "tuning" else task.splits()[1]

    class _Args:
        max_completion_length = task.max_new_tokens

    from accelerate import Accelerator

    class _Trainer:  # what ValidationCallback reads from a trainer (one process, no training)
        processing_class = tokenizer
        args = _Args()
        model_wrapped = model
        generated_tokens_total = 0
        accelerator = Accelerator(cpu=True)

        class state:  # noqa: N801
            global_step = 0

    trainer = _Trainer()
    trainer.model = model

    def run_cb(lean: bool):
        import trl_loo_gspo.trainer.validation as validation

        cb = validation.ValidationCallback(
            trainer, split, verifier, 1, samples=plan.eval_samples, seed=args.seed, batch_size=args.batch_size
        )
        original, log = validation.plain_generation, validation.Trainer.log
        validation.Trainer.log = lambda *_a, **_k: None
        validation.plain_generation = original if lean else (lambda _model: False)
        try:
            return cb.evaluate()
        finally:
            validation.plain_generation, validation.Trainer.log = original, log

    timings = {}
    for label, lean in (("lean", True),) if args.lean_only else (("generate", False), ("lean", True)):
        times, out = [], None
        for _ in range(args.repeats):
            t = time.perf_counter()
            out = run_cb(lean)
            times.append(time.perf_counter() - t)
        timings[label] = statistics.median(times)
        print(
            f"ValidationCallback.evaluate, {label}: median {timings[label]:.2f} s over {args.repeats} "
            f"({[round(x, 2) for x in times]}) -> pass@1 {out['eval/pass_at_1']:.4f}, "
            f"sampled {out['eval/pass_rate']:.4f}",
            flush=True,
        )
    if "generate" in timings:
        print(f"speedup {timings['generate'] / timings['lean']:.2f}x")
    if args.profile:
        cProfile.runctx("run_cb(True)", globals(), locals(), "/tmp/eval.prof")
        pstats.Stats("/tmp/eval.prof").sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
