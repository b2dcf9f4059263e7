"""Ratio noise in a real training run (issue 35): the ``noise/*`` metrics of ``LooGspoTrainer`` on the chain study's
task, policy and settings, in float32 and in bf16 on this CPU.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/ratio_noise_run.py [--rounds 2] [--seed 0] [--json OUT.json]

The run is the ``full`` variant of ``recipes/ablations/chain-study.yaml`` at seed 0: its warm-started 0.5M-parameter
policy (a trained model, not a random one: built, or taken from the demo's policy cache), its chained-addition
training split, 32 prompts x 8 answers per round and 4 optimizer steps of 64 answers per round (so TRL computes the
old log-probs in their own pass and the first step of each round is a true on-policy measurement), learning rate
5e-5, GSPO's ε = 3e-4 / 4e-4. Modes: ``float32``; ``bf16-autocast`` (float32 weights, ``bf16=True``: TRL's path for a
model loaded in float32); ``bf16`` (weights cast to bfloat16, ``bf16=True``); ``bf16+fp32-head`` (the same with
TRL's ``cast_lm_head_to_fp32=True``). Prints each first update's ``noise/*`` from the trainer's own log history.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "recipes" / "ablations" / "chain-study.yaml"
MODES = ("float32", "bf16-autocast", "bf16", "bf16+fp32-head")
KEYS = (
    "noise/answers",
    "noise/out_of_range",
    "noise/clip_ratio",
    "noise/abs_log_ratio/median",
    "noise/abs_log_ratio/p90",
    "noise/abs_log_ratio/max",
)


def run(mode: str, rounds: int, seed: int, work: Path) -> dict[str, Any]:
    from trl_loo_gspo import LooGspoTrainer
    from trl_loo_gspo.demo.policy import PolicySpec, load_or_build_policy
    from trl_loo_gspo.experiment.ablation.plan import AblationPlan, demo_args, demo_task

    plan = AblationPlan.from_yaml(PLAN)
    task, verifier = demo_task(plan, seed)
    policy, tokenizer, _ = load_or_build_policy(PolicySpec(task=task, seed=seed, **plan.policy), log=lambda _: None)
    model = copy.deepcopy(policy)
    if mode in ("bf16", "bf16+fp32-head"):
        model = model.to(torch.bfloat16)
    overrides = {
        **plan.variant_config("full"),
        "learning_rate": 5e-5,  # the sweep's choice for full (docs/results/README.md, chain-study)
        "output_dir": str(work / mode),
        "max_steps": rounds * plan.common["steps_per_generation"],
        "bf16": mode != "float32",
        "cast_lm_head_to_fp32": mode == "bf16+fp32-head",
        "logging_steps": 1,
        "report_to": [],
        "summary_table": False,
    }
    args = demo_args(plan, "full", overrides, False, seed, task)
    train, _ = task.splits()
    trainer = LooGspoTrainer(
        model=model, reward_funcs=[verifier], args=args, train_dataset=train, processing_class=tokenizer
    )
    start = time.perf_counter()
    trainer.train()
    fresh = [{"step": e["step"], **{k: e[k] for k in KEYS}} for e in trainer.state.log_history if "noise/answers" in e]
    return {"mode": mode, "seconds": round(time.perf_counter() - start, 1), "first_updates": fresh}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--work", default="outputs/ratio-noise-run")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = [run(mode, args.rounds, args.seed, Path(args.work)) for mode in args.modes]
    print("$ python benchmarks/ratio_noise_run.py " + " ".join(sys.argv[1:] if argv is None else argv) + "\n")
    print("| mode | step | answers | out of range | clipped | median \\|log s\\| | p90 | max | train s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for result in results:
        for e in result["first_updates"]:
            print(
                f"| {result['mode']} | {e['step']} | {e['noise/answers']:.0f} | {e['noise/out_of_range']:.3f} | "
                f"{e['noise/clip_ratio']:.3f} | {e['noise/abs_log_ratio/median']:.2e} | "
                f"{e['noise/abs_log_ratio/p90']:.2e} | {e['noise/abs_log_ratio/max']:.2e} | {result['seconds']} |"
            )
    print(f"\ntorch {torch.__version__}, 1 thread")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
