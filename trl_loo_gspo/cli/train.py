"""``trl-loo-gspo train``: parse the recipe and flags, train, save or push; exit status 3 when nothing trained.

The parser, the data, the verifier and the trainer come from :mod:`trl_loo_gspo.experiment.build`.
"""

from __future__ import annotations

import os
import sys

from ..experiment.build import make_parser, missing_required, run

#: Exit status of ``trl-loo-gspo train`` when the run finished without moving the policy on any answer.
NOTHING_TRAINED = 3


def main(argv: list[str] | None = None) -> int:
    """Run ``trl-loo-gspo train`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    parser = make_parser()
    script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    problem = missing_required(script_args, model_args)
    if problem:
        parser.error(problem)  # usage and the message on stderr, exit status 2 (argparse's convention)
    trainer = run(script_args, training_args, model_args)
    reason = trainer.nothing_trained() if hasattr(trainer, "nothing_trained") else None
    if reason:  # the model was saved, but it is the starting policy: do not look like success
        print(f"trl-loo-gspo train: the run finished but trained nothing: {reason}.", file=sys.stderr)
        return NOTHING_TRAINED
    return 0
