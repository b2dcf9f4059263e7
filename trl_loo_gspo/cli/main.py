"""The ``trl-loo-gspo`` command line (also ``python -m trl_loo_gspo``): ``train``, ``demo``, ``ablate`` and
``local-setup``.

Nothing heavy is imported until a command runs (``--help`` of every command answers without importing torch), and
the user errors that can be found without it (an unknown flag, a missing file) are reported before torch,
transformers or TRL are imported. User errors (a missing file, a bad value, a directory that cannot be written) are
one ``error:`` line and exit status 2 (:mod:`.errors`); ``--debug`` or ``TRL_LOO_GSPO_DEBUG=1`` shows the traceback.
Every flag of every command takes underscores or dashes (``--rollout_tokens`` = ``--rollout-tokens``; the help shows
the underscores of TRL's flags), and an unknown one is named with the nearest known flag (:mod:`.flags`).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from .errors import EXIT_USAGE, UserError, as_user_errors, report, strip_debug
from .flags import CliParser, nearest, train_precheck

PROG = "trl-loo-gspo"
#: The one line every command's help ends with.
SPELLINGS = "Every flag also takes dashes: --output-dir is --output_dir."


def _positive_int(text: str) -> int:
    value = int(text.replace("_", "").replace(",", ""))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number > 0, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _demo_parser(sub) -> None:
    from ..demo.config import DemoConfig

    defaults = DemoConfig()
    demo = sub.add_parser(
        "demo",
        epilog=SPELLINGS,
        help="Train a small local policy with verifiable rewards on a CPU in minutes (offline).",
        description="Build (or load from the cache) a small Qwen2 policy warm-started on integer addition, measure "
        "its held-out pass rate, train it with LooGspoTrainer on a rollout-token budget, and measure again. "
        "Nothing is downloaded. Writes metrics.json and learning_curve.png to --output_dir (the trained policy is "
        "not saved: the demo measures, docs/demo.md). Ctrl-C during training stops it and writes the results "
        "measured so far (exit status 130).",
    )
    demo.add_argument(
        "--output_dir",
        default=defaults.output_dir,
        help="where metrics.json and learning_curve.png go (default %(default)s). A complete earlier run there is "
        "kept: this run then writes to the next free DIR-2, DIR-3, ... (--overwrite replaces it instead); an "
        "interrupted one is replaced",
    )
    demo.add_argument(
        "--overwrite", action="store_true", help="replace a complete earlier run in --output_dir instead of keeping it"
    )
    demo.add_argument("--seed", type=int, default=defaults.seed, help="seeds the task split, policy and training")
    budget = demo.add_mutually_exclusive_group()
    budget.add_argument(
        "--rollout_tokens",
        type=_positive_int,
        default=defaults.rollout_tokens,
        help=f"training budget in generated tokens (default {defaults.rollout_tokens:,})",
    )
    budget.add_argument(
        "--minutes", type=_positive_float, default=None, help="training budget in wall-clock minutes instead"
    )
    demo.add_argument(
        "--baseline",
        action="store_true",
        help="also train TRL's own GRPO objective (LooGspoConfig.stock_trl: TRL's loss type, advantages and clip "
        "defaults, on the same trainer) from the same policy on the same budget, and compare",
    )
    demo.add_argument("--fresh", action="store_true", help="rebuild the warm-started policy instead of the cache")
    demo.add_argument(
        "--cache_dir",
        default=None,
        help="policy cache (default: $TRL_LOO_GSPO_CACHE, else ~/.cache/trl_loo_gspo); a damaged entry is rebuilt",
    )
    demo.add_argument(
        "--learning_rate",
        type=_positive_float,
        default=defaults.learning_rate,
        help="AdamW learning rate of the training run(s), constant (default %(default)g)",
    )
    demo.add_argument("--quiet", action="store_true", help="no progress bar or table")
    demo.add_dash_spellings()


def _ablate_parser(sub) -> None:
    ablate = sub.add_parser(
        "ablate",
        help="Run an equal-budget ablation from a YAML file (resumable) and write results.csv, report.md and plots.",
        usage="trl-loo-gspo ablate PLAN.yaml [--output_dir DIR] [--reuse_stale]  (or --config PLAN.yaml)",
        description="Every (variant, seed) of the YAML trains to the same rollout-token budget and is scored on the "
        "held-out validation split; finished runs are skipped on a re-run. The YAML's keys and what each one does: "
        "docs/experiments.md section 3; examples: recipes/ablations/ (recipes/ablations/demo.yaml to start). "
        "Several workers may run one plan at once (`ablate PLAN.yaml &` then `ablate PLAN.yaml`): on a terminal "
        "the first one started draws the progress of the whole plan and the others train silently; in a log file or "
        "a pipe every worker prints one line per run it finishes. The worker that finds every run finished says "
        "which files the report writes, then names each file written.",
        epilog=SPELLINGS,
    )
    ablate.add_argument("config", nargs="?", metavar="PLAN.yaml", help="the ablation YAML")
    ablate.add_argument("--config", dest="config_flag", metavar="PLAN.yaml", help="the ablation YAML, as a flag")
    ablate.add_argument("--output_dir", default=None, help="override the YAML's output_dir")
    ablate.add_argument(
        "--reuse_stale",
        action="store_true",
        help="reuse run records made by other code or for another config (refused by default)",
    )
    ablate.add_dash_spellings()


def _local_setup_parser(sub) -> None:
    local = sub.add_parser(
        "local-setup",
        help="Write a tiny local model and a data file for a recipe, and print the command that trains the recipe "
        "on them (offline, on a CPU).",
        description="For a machine that cannot reach the Hub or has no GPU: writes DIR/model (a tiny Qwen2 with a "
        "character tokenizer and a chat template) and DIR/<task>.jsonl (rows in the raw format of the recipe's "
        "dataset, so its mapper runs unchanged; the proofs recipe ships its data), then prints the "
        "`trl-loo-gspo train --config recipes/<task>-lora.yaml ...` command that trains on them in seconds. The "
        "model is untrained: this checks the setup, it does not learn the task (docs/recipes.md section 5).",
        epilog=SPELLINGS,
    )
    local.add_argument("directory", help="where the model and the data file go")
    local.add_argument("--task", choices=["math", "code", "proofs"], default="math", help="the recipe's task")
    local.add_dash_spellings()


def build_parser() -> CliParser:
    """The parser of ``demo``, ``ablate`` and ``local-setup`` (``train`` has its own,
    :mod:`trl_loo_gspo.experiment.parser`); ``parser.commands`` maps each command to its own parser."""
    parser = CliParser(
        prog=PROG,
        description="LOO-GSPO trainer for TRL: tools.",
        epilog="--debug (anywhere) or TRL_LOO_GSPO_DEBUG=1: show the traceback of an error instead of one line. "
        + SPELLINGS,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CliParser)
    sub.add_parser(
        "train",
        help="Train with LooGspoTrainer from a recipe YAML plus --flag overrides (TrlParser, like `trl grpo`); "
        "`trl-loo-gspo train --help` lists every flag.",
    )
    _demo_parser(sub)
    _ablate_parser(sub)
    _local_setup_parser(sub)
    parser.commands = dict(sub.choices)
    for name, command in parser.commands.items():
        command.set_defaults(command=name)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by its command's own parser: an unknown flag is named (with the nearest known one) after the
    command's usage, not the top-level one; argparse's ``error:`` on stderr and exit status 2."""
    parser = build_parser()
    if argv and argv[0] in parser.commands:
        return parser.commands[argv[0]].parse_args(argv[1:])
    if argv and not argv[0].startswith("-"):
        guess = nearest(argv[0], list(parser.commands))
        hint = f" (did you mean {guess}?)" if guess else ""
        parser.error(f"unknown command {argv[0]!r}{hint}; the commands: {', '.join(parser.commands)}")
    return parser.parse_args(argv)


def _ablate(args) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # transformers' v6 renames (gradient_checkpointing -> activation_checkpointing): not the user's concern, and
    # they filled the log of every worker (as the demo does)
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    if args.config and args.config_flag:
        raise UserError(f"one plan: {args.config} or --config {args.config_flag}, not both")
    path = args.config or args.config_flag
    if not path:
        raise UserError("the ablation plan is missing: trl-loo-gspo ablate recipes/ablations/demo.yaml")
    if not os.path.isfile(path):  # before the runner's imports (torch): a typo is answered at once
        shipped = "recipes/ablations"
        hint = f" (plans here: {shipped}/*.yaml)" if os.path.isdir(shipped) else ""
        raise UserError(f"plan file not found: {path}{hint}")
    from ..demo.run import EXIT_INTERRUPTED
    from ..experiment.ablation import AblationPlan, run_ablation

    with as_user_errors(OSError, ValueError):  # a bad plan: its problems, not a traceback
        plan = AblationPlan.from_yaml(path)
    if args.output_dir:
        plan.output_dir = args.output_dir
    try:
        with as_user_errors(ValueError):  # stale records: what they are and how to proceed
            run_ablation(plan, reuse_stale=args.reuse_stale)  # (its progress, the report's files, or who's left)
    except KeyboardInterrupt:  # one line, not a traceback: the finished runs' records are on disk
        print(
            f"Interrupted (Ctrl-C): the run in training is dropped; every finished run's record is kept in "
            f"{plan.output_dir}, and the same command continues where this one stopped."
        )
        return EXIT_INTERRUPTED
    return 0


def _demo(args) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from ..demo.config import DemoConfig, prepare_output_dir

    with as_user_errors(ValueError):
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
            overwrite=args.overwrite,
        )
    with as_user_errors(OSError):  # before anything is built: an unwritable folder fails in one line, at once
        prepare_output_dir(config.output_dir, config.overwrite)
    import torch

    from ..demo.run import EXIT_INTERRUPTED, run_demo

    torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
    try:
        metrics = run_demo(config)
    except KeyboardInterrupt:  # before training (warm start, first evaluation): nothing measured, nothing written
        print(f"Interrupted (Ctrl-C) before training had results to write: nothing written to {args.output_dir}.")
        return EXIT_INTERRUPTED
    return EXIT_INTERRUPTED if metrics.get("interrupted") else 0


def main(argv: list[str] | None = None) -> int:
    """Run the ``trl-loo-gspo`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv, debug = strip_debug(list(sys.argv[1:] if argv is None else argv))
    if argv and argv[0] == "train":  # TrlParser owns every flag of `train` (like `trl grpo`)
        from . import train  # (light: it imports TRL when a run starts)

        problem = None if train._wants_help(argv[1:]) else train_precheck(argv[1:], train.PROG)
        if problem:  # found without TRL: a missing recipe, an unknown flag
            return report(UserError(problem), train.PROG, debug)
        return train.main(argv[1:], debug=debug)
    args = parse(argv)  # argparse: the command's usage and `error:` on stderr, exit status 2
    try:
        if args.command == "ablate":
            return _ablate(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "local-setup":
            from ..demo.local import main as local_setup

            with as_user_errors(OSError):
                return local_setup(args.directory, args.task)
    except UserError as error:
        return report(error, f"{PROG} {args.command}", debug)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
