"""The two spellings of a long flag (``--rollout_tokens`` and ``--rollout-tokens``), the nearest known name of a typo,
and argparse's help with each flag listed once: shared by the commands' parser (:mod:`trl_loo_gspo.cli.flags`) and
``train``'s ``TrlParser`` (:mod:`.parser`). The standard library only, so the CLI imports it before TRL and torch.
"""

from __future__ import annotations

import argparse
import difflib


def underscored(option: str) -> str:
    """``--rollout-tokens`` -> ``--rollout_tokens`` (the spelling ``--help`` shows); other strings unchanged."""
    return "--" + option[2:].replace("-", "_") if option.startswith("--") else option


def dashed(option: str) -> str:
    """``--rollout_tokens`` -> ``--rollout-tokens``."""
    return "--" + option[2:].replace("_", "-") if option.startswith("--") else option


def nearest(name: str, known: list[str]) -> str | None:
    """The known name closest to ``name`` (a typo's likely intent), or None when nothing is close."""
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return match[0] if match else None


def is_hidden_spelling(option: str, action: argparse.Action) -> bool:
    """Whether ``option`` is the dash spelling of another of ``action``'s option strings (left out of the help)."""
    return option.startswith("--") and option != underscored(option) and underscored(option) in action.option_strings


class OneSpellingFormatter(argparse.HelpFormatter):
    """argparse's help with each flag in one spelling (its dash alias left out)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        shown = [o for o in action.option_strings if not is_hidden_spelling(o, action)]
        if len(shown) == len(action.option_strings):
            return super()._format_action_invocation(action)
        original = action.option_strings
        action.option_strings = shown
        try:
            return super()._format_action_invocation(action)
        finally:
            action.option_strings = original
