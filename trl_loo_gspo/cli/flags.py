"""One flag style for every command: each long flag answers to its underscore spelling (shown in ``--help``, the
spelling of TRL's flags and of the recipe keys) and to its dash spelling (``--rollout_tokens`` = ``--rollout-tokens``),
and an unknown flag is one ``error:`` line naming the nearest known flag, after the usage of the command it was
given to.

:class:`CliParser` is the ``argparse`` parser of ``demo``, ``ablate`` and ``local-setup``; ``train``'s own parser
(``TrlParser``, :mod:`trl_loo_gspo.experiment.parser`) has both spellings from transformers' ``HfArgumentParser``.
:func:`train_precheck` finds the user errors of ``train`` that need no TRL (a missing or broken recipe file, an
unknown flag, from the flag list stored with the help text: :mod:`.help_cache`) before TRL, transformers and torch
are imported; its messages are the ones ``train``'s parser gives (``tests/test_cli_flags.py`` compares them).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from ..experiment.spelling import OneSpellingFormatter, dashed, nearest, underscored

#: argparse's pattern of a negative number (a value, not a flag: ``--seed -1``).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def unknown_flags_message(unknown: list[str], known: list[str], prog: str) -> str:
    """``unknown flag --x (did you mean --y?); `PROG --help` lists every flag`` (the wording of ``train``)."""
    problems = []
    for flag in unknown:
        guess = nearest(flag, known)
        problems.append(flag + (f" (did you mean {guess}?)" if guess else ""))
    return f"unknown flag{'s' if len(unknown) > 1 else ''} {', '.join(problems)}; `{prog} --help` lists every flag"


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose long flags take underscores or dashes (declare them with underscores, then call
    :meth:`add_dash_spellings`) and whose unknown flags get a "did you mean"."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", OneSpellingFormatter)
        super().__init__(*args, **kwargs)

    def add_dash_spellings(self) -> None:
        """Give every long flag with an underscore its dash spelling as a second option string (hidden in help)."""
        for action in self._actions:
            for option in list(action.option_strings):
                other = dashed(option)
                if other != option and other not in self._option_string_actions:
                    action.option_strings.append(other)
                    self._option_string_actions[other] = action

    def _resolve_abbreviations(self, args: list[str]) -> list[str]:
        """A unique prefix of one flag (``--rollout`` for ``--rollout_tokens``), in either spelling, written out: with
        two spellings per flag argparse itself would call it ambiguous."""
        out: list[str] = []
        for index, token in enumerate(args):
            if token == "--":
                return out + args[index:]
            name, sep, value = token.partition("=")
            if token.startswith("--") and name not in self._option_string_actions:
                actions = {
                    id(action): action
                    for option, action in self._option_string_actions.items()
                    if option.startswith("--") and underscored(option).startswith(underscored(name))
                }
                if len(actions) == 1:
                    token = next(iter(actions.values())).option_strings[0] + sep + value
            out.append(token)
        return out

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._resolve_abbreviations(args), namespace)

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(self.unrecognized_message(extras))
        return namespace

    def known_flags(self) -> list[str]:
        """The long flags in the spelling the help shows."""
        return sorted(
            {o for a in self._actions for o in a.option_strings if o.startswith("--") and o == underscored(o)}
        )

    def unrecognized_message(self, extras: list[str]) -> str:
        unknown = [underscored(t.partition("=")[0]) for t in extras if t.startswith("-") and len(t) > 1]
        unknown = [t for t in unknown if not _NEGATIVE_NUMBER.match(t)]
        if unknown:
            return unknown_flags_message(unknown, self.known_flags(), self.prog)
        return f"unexpected argument {extras[0]!r}: `{self.prog} --help` lists the arguments"


# ---------------------------------------------------------------------------------- train, before TRL is imported


def recipe_file_problem(path: str) -> str | None:
    """Why ``--config PATH`` cannot be read as a recipe (the words of ``train``'s parser), or None."""
    import yaml

    if not os.path.isfile(path):
        shipped = []
        if os.path.isdir("recipes"):
            shipped = sorted(p for p in os.listdir("recipes") if p.endswith(".yaml"))
        hint = f" (recipes here: {', '.join('recipes/' + p for p in shipped)})" if shipped else ""
        return f"recipe file not found: --config {path}{hint}"
    try:
        with open(path) as f:
            yaml.safe_load(f)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        return f"recipe {path} is not valid YAML{line}: {problem}"
    except OSError as error:  # a folder, no permission: the parser's open() says so
        return " ".join(str(error).split())
    return None


def unknown_train_flags(args: list[str], known: list[str]) -> list[str] | None:
    """The ``--flags`` of ``args`` that ``train``'s parser cannot match (no known flag is or starts with them), in
    order; None when a token's fate is not certain without the parser (a single-dash token, e.g. ``-1e-5``)."""
    unknown = []
    for token in args:
        if token == "--":
            break
        if token.startswith("-") and not token.startswith("--") and len(token) > 1:
            if not _NEGATIVE_NUMBER.match(token):
                return None
            continue
        name = token.partition("=")[0]
        if not token.startswith("--") or len(token) == 2 or " " in token:
            continue
        if not any(flag.startswith(name) for flag in known):
            unknown.append(name)
    return unknown


def train_precheck(argv: list[str], prog: str = "trl-loo-gspo train") -> str | None:
    """A user error of ``trl-loo-gspo train ARGV`` that is certain before TRL is imported (its message), else None:
    ``--config`` without a file, a recipe file that is missing or not YAML, an unknown flag (when the stored help has
    the flag list of the installed code and libraries)."""
    args = list(argv)
    if "--config" in args:
        index = args.index("--config")
        if index + 1 >= len(args):
            return "--config needs a recipe file: --config recipes/math-lora.yaml"
        problem = recipe_file_problem(args[index + 1])
        if problem:
            return problem
        del args[index : index + 2]
    from .help_cache import cached_flags

    known = cached_flags()
    if not known:
        return None
    unknown = unknown_train_flags(args, [*known, "--help-all", "--help_all"])
    if not unknown:
        return None
    return unknown_flags_message(unknown, known, prog)
