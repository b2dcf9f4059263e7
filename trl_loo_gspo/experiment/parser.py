"""The argument parser of ``trl-loo-gspo train``: TRL's ``TrlParser`` with a help text a person can read.

``TrlParser`` parses the three dataclasses exactly like ``trl grpo`` (``--config recipe.yaml`` plus command-line
overrides); its own ``--help`` is ~1,600 lines, starts with a usage line of every flag and never mentions
``--config``. Here ``--help`` starts with the usage the README teaches, then describes our flags (task and data, the
method, the model) in full and lists TRL's and transformers' training flags by name; ``--help-all`` prints the
complete per-flag help of the stock parser.

Parsing is TrlParser's, with what a person running a recipe needs around it (each problem is a ``ValueError`` whose
message says what to change; the CLI prints it as one ``error:`` line):

* ``--FLAG None`` (or ``null``, or an empty string) unsets a value the recipe sets: the field takes its default
  (``None`` for most optional fields), as if the recipe did not have the line.
* ``--loss_type X`` on the command line, different from the recipe's loss, drops the recipe's objective fields
  (clip range, aggregation, advantages, guard: written for the recipe's loss) that the command line does not give,
  with a note listing them; the values the loss type resolves to apply instead.
* Values are checked by the config itself (``LooGspoConfig`` and its objective resolution), not by ``choices``
  frozen into the parser, so names registered later are accepted.
* A recipe file that does not exist or is not YAML, an unknown key in it or an unknown flag (with the nearest known
  one: "did you mean --dynamic_sampling?"), and ``bf16`` on a machine that cannot run it (with the flag that fixes
  it) are refused before anything is built.
* A recipe's ``activation_checkpointing`` (transformers >= 5.23) is read as ``gradient_checkpointing`` by an older
  transformers.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import textwrap
import types
import typing

from transformers import TrainingArguments
from trl import GRPOConfig, ModelConfig, TrlParser

from .spelling import OneSpellingFormatter, nearest

USAGE = (
    "trl-loo-gspo train --config RECIPE.yaml [--FLAG VALUE ...]\n"
    "       trl-loo-gspo train --model_name_or_path MODEL --dataset_name DATA [--FLAG VALUE ...]"
)

DESCRIPTION = """\
Train with LooGspoTrainer, like `trl grpo`: a recipe YAML of `flag: value` pairs (plus an optional `env:` mapping)
and command-line flags that override it. Every GRPOConfig / TrainingArguments flag is accepted.

examples:
  trl-loo-gspo train --config recipes/math-lora.yaml
  trl-loo-gspo train --config recipes/math-lora.yaml --learning_rate 5e-6 --output_dir out/run-2
  accelerate launch --config_file recipes/accelerate/ddp.yaml -m trl_loo_gspo train --config recipes/math-lora.yaml

  --config RECIPE.yaml  the recipe (see recipes/ and docs/recipes.md); flags given on the command line win
  --FLAG None           unset a value the recipe sets: the field's default, as if the recipe had no such line
                        (also null or ""); --loss_type X drops the recipe's fields written for its own loss
  --help-all            the full description of every flag, TRL's and transformers' included
  --debug               show the traceback of an error (otherwise one `error:` line and exit status 2)
  --flag-name VALUE     every flag also takes dashes: --learning-rate is --learning_rate (as in every command)"""

EPILOG = "The method behind the flags: docs/method.md; every flag of LooGspoConfig: docs/configuration.md."


#: Command-line values that unset a field (``--system_prompt None``, ``--loss_aggregation null``, ``--x ""``).
UNSET_WORDS = ("None", "null", "")
#: LooGspoConfig fields whose meaning depends on the loss: a recipe's values are dropped when the command line
#: switches ``loss_type`` (and does not give them again).
OBJECTIVE_FIELDS = (
    "advantage_estimator",
    "loss_aggregation",
    "log_ratio_clamp",
    "epsilon",
    "epsilon_high",
    "importance_sampling_level",
    "scale_rewards",
)
#: transformers 5.23 renamed these TrainingArguments fields (the old names warn): recipes use the new names, read as
#: the old ones by a transformers that does not have them yet.
RENAMED = {
    "activation_checkpointing": "gradient_checkpointing",
    "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs",
}
#: The help's width, fixed (not the terminal's), so that the help text is the same everywhere.
HELP_WIDTH = 100


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _accepts_none(cls) -> dict[str, bool]:
    """``{field: whether its annotation admits None}`` for the dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name)
        args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
        out[f.name] = type(None) in args
    return out


class TrainHelpFormatter(OneSpellingFormatter, argparse.RawDescriptionHelpFormatter):
    """The help with each flag in its underscore spelling only (``HfArgumentParser`` adds the dash spelling of every
    flag as a second option string: accepted, not listed), the description's line breaks kept."""


class TrainParser(TrlParser):
    """``TrlParser`` over (script arguments, ``LooGspoConfig``, ``ModelConfig``) with a grouped, short ``--help``."""

    def __init__(self, script_cls, config_cls, prog: str = "trl-loo-gspo train") -> None:
        super().__init__((script_cls, config_cls, ModelConfig), prog=prog, usage=USAGE)
        self.description, self.epilog = DESCRIPTION, EPILOG
        self.formatter_class = functools.partial(TrainHelpFormatter, width=HELP_WIDTH)
        accepts_none: dict[str, bool] = {}
        for cls in (script_cls, config_cls, ModelConfig):
            accepts_none.update(_accepts_none(cls))
        self._accepts_none = accepts_none
        self._field_defaults: dict[str, object] = {}  # the first action of a dest (not a --no_X complement's)
        for action in self._actions:
            if action.dest in accepts_none:
                self._field_defaults.setdefault(action.dest, action.default)
        self._unset: dict[str, object] = {}  # dest -> value, from `--FLAG None` on the command line
        self._recipe: dict[str, object] = {}  # the recipe's values (after the unsets and the loss-type switch)
        self._recipe_path: str | None = None
        self._given: dict[str, str] = {}  # dest -> the raw command-line value
        for action in self._actions:
            # the config checks its own values (objective resolution, registries): no frozen choices here
            if action.dest in accepts_none and action.choices is not None:
                action.choices = None
        # Which dataclass each destination comes from, in the order the help shows them.
        ours = set(getattr(config_cls, "__annotations__", {}))  # fields LooGspoConfig declares (or re-declares)
        grpo = _field_names(GRPOConfig) - _field_names(TrainingArguments) - ours
        self._described = [
            (f"task, data, verifier and validation ({script_cls.__name__})", _field_names(script_cls)),
            (f"the method ({config_cls.__name__}: its own flags and the GRPO fields it sets)", ours),
            ("model, dtype and LoRA (trl.ModelConfig)", _field_names(ModelConfig)),
        ]
        self._listed = [
            ("GRPO arguments (trl.GRPOConfig)", grpo),
            ("training arguments (transformers.TrainingArguments)", _field_names(config_cls) - ours - grpo),
        ]

    def format_help(self) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        actions = [a for a in self._actions if a.dest != "help"]
        for title, names in self._described:
            formatter.start_section(title)
            formatter.add_arguments([a for a in actions if a.dest in names])
            formatter.end_section()
        for title, names in self._listed:
            flags = sorted(
                {a.option_strings[0] for a in actions if a.dest in names and a.option_strings[0][:5] != "--no_"}
            )
            formatter.start_section(f"{title}: {len(flags)} flags, described by --help-all")
            formatter.add_text(textwrap.fill(" ".join(flags), width=100, break_on_hyphens=False))
            formatter.end_section()
        formatter.add_text(self.epilog)
        return formatter.format_help()

    def format_help_all(self) -> str:
        """The stock argparse help: every flag with its full help text."""
        return argparse.ArgumentParser.format_help(self)

    def parse_args_and_config(self, args=None, **kwargs):
        args = ["--help-all" if a == "--help_all" else a for a in (sys.argv[1:] if args is None else args)]
        if "--help-all" in args:
            self._print_message(self.format_help_all(), sys.stdout)
            self.exit(0)
        self._recipe_path = None
        if "--config" in args:
            index = args.index("--config")
            if index + 1 >= len(args):
                raise ValueError("--config needs a recipe file: --config recipes/math-lora.yaml")
            self._recipe_path = args[index + 1]
            self._check_recipe_file(self._recipe_path)
        args = self._take_unsets(args)
        self._apply_unsets()
        return super().parse_args_and_config(args=args, **kwargs)

    # ------------------------------------------------------------------ recipe and flag checks
    def _check_recipe_file(self, path: str) -> None:
        import yaml

        if not os.path.isfile(path):
            shipped = []
            if os.path.isdir("recipes"):
                shipped = sorted(p for p in os.listdir("recipes") if p.endswith(".yaml"))
            hint = f" (recipes here: {', '.join('recipes/' + p for p in shipped)})" if shipped else ""
            raise FileNotFoundError(f"recipe file not found: --config {path}{hint}")
        try:
            with open(path) as f:
                yaml.safe_load(f)
        except yaml.YAMLError as error:
            where = getattr(error, "problem_mark", None)
            line = f" (line {where.line + 1})" if where is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ValueError(f"recipe {path} is not valid YAML{line}: {problem}") from error

    def _dest_of(self, option: str) -> str | None:
        action = self._option_string_actions.get(option)
        return None if action is None else action.dest

    def _take_unsets(self, args: list[str]) -> list[str]:
        """Remove ``--FLAG None`` pairs from ``args`` (recorded in ``self._unset``); record every flag given."""
        self._unset, self._given = {}, {}
        kept: list[str] = []
        index = 0
        while index < len(args):
            token = args[index]
            option, _, inline = token.partition("=") if token.startswith("--") else (token, "", "")
            dest = self._dest_of(option) if token.startswith("--") else None
            if dest is not None and dest in self._accepts_none:
                value = inline if "=" in token else (args[index + 1] if index + 1 < len(args) else None)
                is_value = value is not None and ("=" in token or not value.startswith("--"))
                self._given[dest] = value if is_value else ""  # (a bare boolean flag: given, without a value)
                if value in UNSET_WORDS and value is not None and not option.startswith("--no_"):
                    self._unset[dest] = self._field_defaults[dest]
                    index += 1 if "=" in token else 2
                    continue
            kept.append(token)
            index += 1
        return kept

    def _apply_unsets(self) -> None:
        for action in self._actions:
            if action.dest in self._unset:
                action.default = self._unset[action.dest]
                action.required = False

    def set_defaults_with_config(self, **kwargs) -> list[str]:
        for new, old in RENAMED.items():  # a recipe in transformers' new spelling, on a transformers without it
            if new in kwargs and new not in self._accepts_none and old in self._accepts_none:
                kwargs[old] = kwargs.pop(new)
        known = sorted(self._accepts_none)
        unknown = [key for key in kwargs if key not in known]
        if unknown:
            problems = []
            for key in unknown:
                guess = nearest(key, known)
                problems.append(f"{key!r}" + (f" (did you mean {guess}?)" if guess else ""))
            raise ValueError(
                f"recipe {self._recipe_path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(problems)}; "
                "every key is a flag of `trl-loo-gspo train --help`"
            )
        kwargs = self._switch_loss(dict(kwargs))
        self._recipe = kwargs
        remaining = super().set_defaults_with_config(**kwargs)
        self._apply_unsets()  # the command line's `--FLAG None` wins over the recipe
        return remaining

    def _switch_loss(self, recipe: dict) -> dict:
        """Drop the recipe's objective fields when the command line chooses another ``loss_type`` (with a note)."""
        given = self._given.get("loss_type")
        if given is None or "loss_type" in self._unset:
            return recipe
        if given == (recipe.get("loss_type") or "loo_gspo"):
            return recipe
        dropped = [k for k in OBJECTIVE_FIELDS if k in recipe and k not in self._given and recipe[k] is not None]
        if dropped:
            values = ", ".join(f"{key}={recipe.pop(key)!r}" for key in dropped)
            print(
                f"Note: --loss_type {given}: the recipe's {values} (set for its own loss) are left unset and "
                f"resolve for {given}; give them on the command line to keep them.",
                file=sys.stderr,
            )
        return recipe

    def parse_args_into_dataclasses(self, args=None, return_remaining_strings=False, **kwargs):
        namespace, remaining = self.parse_known_args(args=args)
        unknown = [token.partition("=")[0] for token in remaining if token.startswith("-")]
        if unknown and not return_remaining_strings:
            known = sorted({o for a in self._actions for o in a.option_strings if o.startswith("--")})
            problems = []
            for flag in unknown:
                guess = nearest(flag, known)
                problems.append(flag + (f" (did you mean {guess}?)" if guess else ""))
            raise ValueError(
                f"unknown flag{'s' if len(unknown) > 1 else ''} {', '.join(problems)}; "
                "`trl-loo-gspo train --help` lists every flag"
            )
        stray = [token for token in remaining if not token.startswith("-")]
        if stray and not return_remaining_strings:
            hint = f" (did you mean --config {stray[0]}?)" if stray[0].endswith((".yaml", ".yml")) else ""
            raise ValueError(f"unexpected argument {stray[0]!r}{hint}: every value follows its --flag")
        self._check_precision(namespace)
        return super().parse_args_into_dataclasses(
            args=args, return_remaining_strings=return_remaining_strings, **kwargs
        )

    def _origin(self, dest: str) -> str:
        if dest in self._given:
            return "on the command line"
        if dest in self._recipe:
            return f"by the recipe {self._recipe_path}"
        return "by default"

    def _check_precision(self, namespace) -> None:
        """bf16 on a machine that cannot run it: say which flag fixes it (not transformers' 'use_cpu' advice)."""
        from ..config.precision import bf16_supported

        for dest in ("bf16", "bf16_full_eval"):
            if getattr(namespace, dest, None) and not bf16_supported(getattr(namespace, "use_cpu", False)):
                dtype = " --dtype float32" if getattr(namespace, "dtype", None) == "bfloat16" else ""
                raise ValueError(
                    f"{dest}=true (set {self._origin(dest)}) needs a GPU with bf16 support, and this machine has "
                    f"none: add --{dest} false{dtype} to train in float32 here (or --use_cpu true to train in bf16 "
                    "on the CPU, slowly)"
                )

    def error(self, message: str):
        """argparse's errors (a bad value, a missing value) as a ``ValueError``: the CLI prints one line."""
        raise ValueError(message)
