"""``trl-loo-gspo train``: parse the recipe and flags, train, save or push; exit status 3 when nothing trained.

The parser, the data, the verifier and the trainer come from :mod:`trl_loo_gspo.experiment.build` (imported when a
run starts: ``--help`` is answered from the stored help text, :mod:`.help_cache`). A user error (a recipe file that
is missing or not YAML, an unknown key or flag, a bad or contradictory value, bf16 without a GPU, a model or
dataset that cannot be reached, an output directory that cannot be written, a checkpoint that cannot be loaded) is
one ``error:`` line and exit status 2 (:mod:`.errors`).
"""

from __future__ import annotations

import os
import sys

from .errors import UserError, as_user_errors, report, strip_debug

#: Exit status of ``trl-loo-gspo train`` when the run finished without moving the policy on any answer.
NOTHING_TRAINED = 3
PROG = "trl-loo-gspo train"


def _wants_help(argv: list[str]) -> bool:
    return any(a in ("-h", "--help") for a in argv) and not {"--help-all", "--help_all"} & set(argv)


def main(argv: list[str] | None = None, debug: bool | None = None) -> int:
    """Run ``trl-loo-gspo train`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv, asked = strip_debug(list(sys.argv[1:] if argv is None else argv))
    debug = asked if debug is None else (debug or asked)
    if _wants_help(argv):
        from .help_cache import train_help

        sys.stdout.write(train_help())
        return 0
    try:
        return _run(argv)
    except UserError as error:
        return report(error, PROG, debug)


def _run(argv: list[str]) -> int:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from ..experiment.build import make_parser, missing_required

    parser = make_parser(PROG)
    with as_user_errors(ValueError, OSError):  # the recipe, the flags and every value the configs check
        script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    problem = missing_required(script_args, model_args)
    if problem:
        raise UserError(problem)
    trainer = run(script_args, training_args, model_args)
    reason = trainer.nothing_trained() if hasattr(trainer, "nothing_trained") else None
    if reason:  # the model was saved, but it is the starting policy: do not look like success
        print(f"{PROG}: the run finished but trained nothing: {reason}.", file=sys.stderr)
        return NOTHING_TRAINED
    return 0


def run(script_args, training_args, model_args):
    """Check what the run needs (output folder, Hub or local files, checkpoint), build, train, save; returns the
    trainer. Problems with the user's input are raised as :class:`UserError`."""
    from ..experiment.build import build_trainer, check_output_dir, check_reachable, finish
    from ..trainer.checkpoints import CheckpointError

    with as_user_errors(OSError):
        check_output_dir(training_args.output_dir)
    with as_user_errors(ValueError, OSError):  # a model or dataset that cannot be reached, a bad data file
        check_reachable(script_args, model_args)
        trainer = build_trainer(script_args, training_args, model_args)
    with as_user_errors(CheckpointError):
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    finish(trainer, script_args, training_args)
    return trainer
