"""The ``trl-loo-gspo`` command line (also ``python -m trl_loo_gspo``): ``train``, ``demo`` and ``ablate``."""

from __future__ import annotations

import argparse
import os
import sys


def _demo_parser(sub) -> None:
    from ..demo.run import DemoConfig

    defaults = DemoConfig()
    demo = sub.add_parser(
        "demo",
        help="Train a small local policy with verifiable rewards on a CPU in minutes (offline).",
        description="Build (or load from the cache) a small Qwen2 policy warm-started on integer addition, measure "
        "its held-out pass rate, train it with LooGspoTrainer on a rollout-token budget, and measure again. "
        "Nothing is downloaded. Writes metrics.json and learning_curve.png to --output-dir. Ctrl-C during training "
        "stops it and writes the results measured so far (exit status 130).",
    )
    demo.add_argument(
        "--output-dir",
        default=defaults.output_dir,
        help="where metrics.json and learning_curve.png go (default %(default)s); the results of an earlier run "
        "there are overwritten, and a line says so",
    )
    demo.add_argument("--seed", type=int, default=defaults.seed, help="seeds the task split, policy and training")
    budget = demo.add_mutually_exclusive_group()
    budget.add_argument(
        "--rollout-tokens",
        type=int,
        default=defaults.rollout_tokens,
        help=f"training budget in generated tokens (default {defaults.rollout_tokens:,})",
    )
    budget.add_argument("--minutes", type=float, default=None, help="training budget in wall-clock minutes instead")
    demo.add_argument(
        "--baseline", action="store_true", help="also train stock trl.GRPOTrainer on the same budget and compare"
    )
    demo.add_argument("--fresh", action="store_true", help="rebuild the warm-started policy instead of the cache")
    demo.add_argument(
        "--cache-dir",
        default=None,
        help="policy cache (default: $TRL_LOO_GSPO_CACHE, else ~/.cache/trl_loo_gspo); a damaged entry is rebuilt",
    )
    demo.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    demo.add_argument("--quiet", action="store_true", help="no progress bar or table")


def _ablate_parser(sub) -> None:
    ablate = sub.add_parser(
        "ablate",
        help="Run an equal-budget ablation from a YAML file (resumable) and write results.csv, report.md and a plot.",
        description="Every (variant, seed) of the YAML trains to the same rollout-token budget and is scored on the "
        "held-out validation split; finished runs are skipped on a re-run. See "
        "trl_loo_gspo/experiment/ablation/plan.py for the schema and recipes/ablations/ for examples.",
    )
    ablate.add_argument("config", help="the ablation YAML")
    ablate.add_argument("--output-dir", default=None, help="override the YAML's output_dir")
    ablate.add_argument(
        "--reuse-stale",
        action="store_true",
        help="reuse run records made by other code or for another config (refused by default)",
    )


def main(argv: list[str] | None = None) -> int:
    """Run the ``trl-loo-gspo`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":  # TrlParser owns every flag of `train` (like `trl grpo`)
        from .train import main as train_main

        return train_main(argv[1:])
    parser = argparse.ArgumentParser(prog="trl-loo-gspo", description="LOO-GSPO trainer for TRL: tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "train",
        help="Train with LooGspoTrainer from a recipe YAML plus --flag overrides (TrlParser, like `trl grpo`); "
        "`trl-loo-gspo train --help` lists every flag.",
    )
    _demo_parser(sub)
    _ablate_parser(sub)
    args = parser.parse_args(argv)

    if args.command == "ablate":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        from ..experiment.ablation import AblationPlan, run_ablation

        try:
            plan = AblationPlan.from_yaml(args.config)
        except (OSError, ValueError) as error:  # a bad plan: its problems, not a traceback
            print(f"trl-loo-gspo ablate: error: {error}", file=sys.stderr)
            return 2
        if args.output_dir:
            plan.output_dir = args.output_dir
        try:
            records = run_ablation(plan, reuse_stale=args.reuse_stale)
        except ValueError as error:  # stale records: what they are and how to proceed
            print(f"trl-loo-gspo ablate: error: {error}", file=sys.stderr)
            return 2
        if records is None:
            print("Other `ablate` processes are still training runs of this plan; the last one writes the report.")
        else:
            print(f"Wrote {plan.output_dir}/results.csv, report.md and pass_rate_vs_tokens.png")
        return 0

    if args.command == "demo":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        import torch

        from ..demo.run import EXIT_INTERRUPTED, DemoConfig, run_demo

        torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
        config = DemoConfig(
            output_dir=args.output_dir,
            seed=args.seed,
            rollout_tokens=0 if args.minutes is not None else args.rollout_tokens,
            minutes=args.minutes,
            baseline=args.baseline,
            fresh=args.fresh,
            cache_dir=args.cache_dir,
            learning_rate=args.learning_rate,
            quiet=args.quiet,
        )
        try:
            metrics = run_demo(config)
        except KeyboardInterrupt:  # before training (warm start, first evaluation): nothing measured, nothing written
            print(f"Interrupted (Ctrl-C) before training had results to write: nothing written to {args.output_dir}.")
            return EXIT_INTERRUPTED
        return EXIT_INTERRUPTED if metrics.get("interrupted") else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
