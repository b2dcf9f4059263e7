"""The argument parser of ``trl-loo-gspo train``: TRL's ``TrlParser`` with a help text a person can read.

``TrlParser`` parses the three dataclasses exactly like ``trl grpo`` (``--config recipe.yaml`` plus command-line
overrides); its own ``--help`` is ~1,600 lines, starts with a usage line of every flag and never mentions
``--config``. Here ``--help`` starts with the usage the README teaches, then describes our flags (task and data, the
method, the model) in full and lists TRL's and transformers' training flags by name; ``--help-all`` prints the
complete per-flag help of the stock parser. Parsing itself is TrlParser's, unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap

from transformers import TrainingArguments
from trl import GRPOConfig, ModelConfig, TrlParser

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
  --help-all            the full description of every flag, TRL's and transformers' included"""

EPILOG = "The method behind the flags: docs/method.md; every flag of LooGspoConfig: docs/configuration.md."


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


class TrainParser(TrlParser):
    """``TrlParser`` over (script arguments, ``LooGspoConfig``, ``ModelConfig``) with a grouped, short ``--help``."""

    def __init__(self, script_cls, config_cls, prog: str = "trl-loo-gspo train") -> None:
        super().__init__((script_cls, config_cls, ModelConfig), prog=prog, usage=USAGE)
        self.description, self.epilog = DESCRIPTION, EPILOG
        self.formatter_class = argparse.RawDescriptionHelpFormatter
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
        args = list(sys.argv[1:] if args is None else args)
        if "--help-all" in args:
            self._print_message(self.format_help_all(), sys.stdout)
            self.exit(0)
        return super().parse_args_and_config(args=args, **kwargs)
