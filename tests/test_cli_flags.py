"""One flag style in every command (issue #46): each flag answers to its underscore and its dash spelling with the
same parsed value, the help shows one, an unknown flag gets "did you mean" after its own command's usage, and the user
errors that need no TRL (an unknown flag, a missing file) are printed before torch, transformers or TRL is imported."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys

import pytest

from trl_loo_gspo.cli import main
from trl_loo_gspo.cli.flags import dashed, train_precheck, underscored, unknown_train_flags
from trl_loo_gspo.cli.help_cache import cached_flags, help_key, parser_flags, shipped_key, train_help
from trl_loo_gspo.cli.main import build_parser, parse
from trl_loo_gspo.experiment.build import make_parser

from .recipe_fixtures import REPO

MATH = str(REPO / "recipes" / "math-lora.yaml")
COMMANDS = ("demo", "ablate", "local-setup")
#: What each command needs besides the flag under test.
REQUIRED = {"demo": [], "ablate": ["plan.yaml"], "local-setup": ["somewhere"]}


def _value(action: argparse.Action) -> list[str]:
    """A valid command-line value for ``action`` (nothing for a switch)."""
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(list(action.choices)[-1])]
    return ["7"]


def _flag_cases():
    for command in COMMANDS:
        for action in build_parser().commands[command]._actions:
            options = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            if options and any("_" in o for o in options):
                yield pytest.param(command, options[0], id=f"{command}:{options[0]}")


@pytest.mark.parametrize("command, flag", list(_flag_cases()))
def test_each_flag_takes_both_spellings_with_the_same_value(command, flag):
    action = build_parser().commands[command]._option_string_actions[flag]
    value = _value(action)
    assert flag == underscored(flag)  # declared (and shown) with underscores
    with_underscores = parse([command, *REQUIRED[command], flag, *value])
    with_dashes = parse([command, *REQUIRED[command], dashed(flag), *value])
    assert vars(with_underscores) == vars(with_dashes)
    assert getattr(with_dashes, action.dest) != action.default  # the flag was read, not left at its default
    for inline in (f"{flag}={value[0]}", f"{dashed(flag)}={value[0]}") if value else ():
        assert vars(parse([command, *REQUIRED[command], inline])) == vars(with_underscores)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_help_shows_one_spelling(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and out.startswith(f"usage: trl-loo-gspo {command}")
    flags = [o for a in build_parser().commands[command]._actions for o in a.option_strings if "_" in o]
    for flag in flags:
        assert flag in out and dashed(flag) not in out.replace("--output-dir is", "")  # (the epilog's example)
    assert "Every flag also takes dashes" in out


def test_the_demo_flags_of_the_issue():
    """`demo --rollout_tokens 1000` (issue #46) and the README's `--rollout-tokens`, abbreviated in either spelling."""
    for argv in (
        ["--rollout_tokens", "1000"],
        ["--rollout-tokens", "1000"],
        ["--rollout", "1000"],
        ["--rollout-t=1000"],
        ["--rollout_t", "1000"],
    ):
        assert parse(["demo", *argv]).rollout_tokens == 1000, argv
    args = parse(["demo", "--output-dir", "a", "--learning_rate", "3e-4", "--cache-dir", "c"])
    assert (args.output_dir, args.learning_rate, args.cache_dir) == ("a", 3e-4, "c")


def test_ablate_takes_the_plan_as_an_argument_or_as_config(capsys):
    assert parse(["ablate", "p.yaml"]).config == parse(["ablate", "--config", "p.yaml"]).config_flag == "p.yaml"
    assert parse(["ablate", "p.yaml", "--output-dir", "o", "--reuse-stale"]).reuse_stale
    code = main(["ablate", "a.yaml", "--config", "b.yaml"])
    assert code == 2 and "one plan: a.yaml or --config b.yaml, not both" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["demo", "--rollout_tokenz", "1000"], "unknown flag --rollout_tokenz (did you mean --rollout_tokens?)"),
        (["demo", "--rollout-tokenz", "1000"], "unknown flag --rollout_tokenz (did you mean --rollout_tokens?)"),
        (["demo", "--no-such-flag"], "unknown flag --no_such_flag; `trl-loo-gspo demo --help` lists every flag"),
        (["ablate", "p.yaml", "--reuse_stail"], "unknown flag --reuse_stail (did you mean --reuse_stale?)"),
        (["ablate", "p.yaml", "--output-dirs", "x"], "unknown flag --output_dirs (did you mean --output_dir?)"),
        (["local-setup", "d", "--tasks", "code"], "unknown flag --tasks (did you mean --task?)"),
        (["ablate", "a.yaml", "b.yaml"], "unexpected argument 'b.yaml'"),
    ],
)
def test_an_unknown_flag_names_the_nearest_after_the_commands_own_usage(argv, expected, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err.startswith(f"usage: trl-loo-gspo {argv[0]} ")  # the command's usage, not the top-level one
    assert err.splitlines()[-1] == f"trl-loo-gspo {argv[0]}: error: {expected}" or expected in err.splitlines()[-1]
    assert "{train,demo,ablate,local-setup}" not in err


def test_an_unknown_command_names_the_nearest(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["local_setup", "d"])
    assert stop.value.code == 2
    assert "unknown command 'local_setup' (did you mean local-setup?)" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------- train


@pytest.fixture(scope="module")
def train_parser():
    return make_parser()


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--learning_rate", "5e-6"),
        ("--output_dir", "out/run-2"),
        ("--num_generations", "4"),
        ("--dynamic_sampling", "false"),
        ("--per_device_train_batch_size", "4"),
        ("--max_completion_length", "64"),
        ("--loss_aggregation", "sequence_mean"),
    ],
)
def test_train_takes_both_spellings_with_the_same_value(flag, value, tmp_path):
    base = ["--config", MATH, "--bf16", "false", "--output_dir", str(tmp_path)]
    parsed = [make_parser().parse_args_and_config(args=[*base, spelling, value]) for spelling in (flag, dashed(flag))]
    assert [dataclasses.asdict(a) for a in parsed[0]] == [dataclasses.asdict(a) for a in parsed[1]]


def test_the_train_help_shows_one_spelling(train_parser):
    text = train_parser.format_help()
    assert "--dataset_name DATASET_NAME" in text and "--dataset-name" not in text
    assert "--learning-rate is --learning_rate" in text  # said once, in the description
    assert "--learning_rate" in text


def test_train_help_all_takes_both_spellings(capsys):
    for spelling in ("--help-all", "--help_all"):
        with pytest.raises(SystemExit) as stop:
            main(["train", spelling])
        assert stop.value.code == 0 and "--learning_rate LEARNING_RATE" in capsys.readouterr().out


def test_a_train_typo_in_dashes_names_the_nearest_flag(capsys):
    code = main(["train", "--config", MATH, "--dynamic-samplng", "true"])
    assert code == 2 and "unknown flag --dynamic-samplng (did you mean --dynamic-sampling?)" in capsys.readouterr().err


@pytest.fixture(scope="module")
def stored_flags():
    """The flag list stored with the help text (built once into the session's cache if the shipped copy is stale)."""
    train_help()
    flags = cached_flags()
    assert flags, "train_help() stores the flag list with the help text"
    return flags


def test_the_stored_flag_list_is_the_parsers(stored_flags, train_parser):
    assert stored_flags == parser_flags(train_parser)


def test_the_train_precheck_never_refuses_a_flag_the_parser_accepts(stored_flags, train_parser):
    known = [*stored_flags, "--help-all", "--help_all"]
    flags = parser_flags(train_parser)
    assert unknown_train_flags(flags, known) == []
    assert unknown_train_flags([f"{flag}=1" for flag in flags], known) == []
    assert unknown_train_flags([flag[: max(3, len(flag) - 3)] for flag in flags], known) == []  # prefixes
    assert unknown_train_flags(["--learning_rate", "-1", "--seed", "-3"], known) == []  # negative numbers: values
    assert unknown_train_flags(["--learning_rate", "-1e-5"], known) is None  # argparse's call: the parser decides
    assert unknown_train_flags(["--", "--anything"], known) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "missing.yaml"],
        ["--config", "BAD"],
        ["--config"],
        ["--config", MATH, "--bf16", "false", "--dynamic_samplng", "true"],
        ["--config", MATH, "--bf16", "false", "--no_such_flag", "1", "--dynamic-samplng", "true"],
        ["--config", MATH, "--bf16", "false", "--no-such-flag=3"],
    ],
    ids=["missing-recipe", "bad-yaml", "config-without-file", "typo", "two-unknown", "inline"],
)
def test_the_train_precheck_says_what_the_parser_says(argv, stored_flags, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    if "BAD" in argv:
        bad = tmp_path / "bad.yaml"
        bad.write_text("task: math\nlearning_rate: [1e-5\n")
        argv = [str(bad) if a == "BAD" else a for a in argv]
    early = train_precheck(argv)
    with pytest.raises((ValueError, OSError)) as late:  # (what train's CLI prints as its `error:` line)
        make_parser().parse_args_and_config(args=argv)
    assert early == str(late.value)


def test_the_train_precheck_passes_what_the_parser_accepts(stored_flags, monkeypatch):
    monkeypatch.chdir(REPO)
    argv = [
        "--config",
        MATH,
        "--bf16",
        "false",
        "--learning-rate",
        "1e-5",
        "--output_dir=x",
        "--system_prompt",
        "None",
    ]
    assert train_precheck(argv) is None
    make_parser().parse_args_and_config(args=argv)


# ------------------------------------------------------------------------------ user errors before heavy imports

HEAVY = ("torch", "transformers", "trl", "datasets", "accelerate", "peft")


def _imports_before_the_error(argv: list[str], env: dict) -> tuple[list[str], str]:
    """Spawn ``python -X importtime -m trl_loo_gspo ARGV``: the heavy top-level modules imported before its
    ``error:`` line (``-X importtime`` writes one stderr line per import, in order), and that line."""
    child = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "trl_loo_gspo", *argv], capture_output=True, text=True, env=env
    )
    assert child.returncode == 2, child.stderr[-3000:]
    lines = child.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if ": error: " in line)
    imported = [line.rsplit("|", 1)[-1].strip() for line in lines[:at] if line.startswith("import time:")]
    return [name for name in imported if name in HEAVY], lines[at]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["demo", "--no-such-flag"], "trl-loo-gspo demo: error: unknown flag --no_such_flag"),
        (["demo", "--rollout_tokenz", "1000"], "(did you mean --rollout_tokens?)"),
        (["ablate", "--config", "missing.yaml"], "trl-loo-gspo ablate: error: plan file not found: missing.yaml"),
        (["ablate", "missing.yaml"], "trl-loo-gspo ablate: error: plan file not found: missing.yaml"),
        (["local-setup", "d", "--tsk", "code"], "trl-loo-gspo local-setup: error: unknown flag --tsk"),
        (["train", "--no_such_flag"], "trl-loo-gspo train: error: unknown flag --no_such_flag"),
        (["train", "--config", "missing.yaml"], "trl-loo-gspo train: error: recipe file not found: --config missing"),
        (["train", "--config", MATH, "--dynamic_samplng", "1"], "(did you mean --dynamic_sampling?)"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_user_errors_are_printed_before_torch_transformers_or_trl_is_imported(argv, expected, tmp_path):
    """Bounds the imports, not the wall clock (no timing thresholds in tests); on an idle machine each of these
    answers in ~0.1–0.3 s. ``train`` knows its flags without TRL from the list stored with its help text: where the
    shipped copy was built with other library versions, one ``train --help`` first builds and caches it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TRL_LOO_GSPO_CACHE": str(tmp_path)}
    env.pop("TRL_LOO_GSPO_DEBUG", None)
    if argv[0] == "train" and shipped_key() != help_key():
        warm = subprocess.run([sys.executable, "-m", "trl_loo_gspo", "train", "--help"], capture_output=True, env=env)
        assert warm.returncode == 0, warm.stderr
    heavy, line = _imports_before_the_error(argv, env)
    assert heavy == [], f"{heavy} imported before: {line}"
    assert expected in line
