"""Full fine-tuning from a LoRA recipe under DeepSpeed/FSDP (docs/recipes.md, section 2): the documented command
turns the reference-KL measurement off, and the refusal names the flag value that does it."""

import re
import shlex

import pytest
from accelerate.utils import DistributedType

from trl_loo_gspo.experiment.build import build_trainer, make_parser
from trl_loo_gspo.trainer.reference_kl import ReferenceKL

from .recipe_fixtures import REPO, cpu_overrides, data_override, save_tiny_model

DOCS = REPO / "docs" / "recipes.md"


def _documented_full_finetune_commands() -> list[list[str]]:
    """The ``trl_loo_gspo train`` arguments of every documented command line with ``--use_peft false``."""
    text = DOCS.read_text().replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        if "trl_loo_gspo train" in line and "--use_peft false" in line:
            words = shlex.split(line)
            commands.append(words[words.index("train") + 1 :])
    return commands


def _parse(argv: list[str], tmp_path):
    model_dir = save_tiny_model(tmp_path / "tiny")
    recipe = REPO / argv[argv.index("--config") + 1]
    argv = [*argv, *cpu_overrides(model_dir, tmp_path / "out"), *data_override(recipe, tmp_path)]
    return make_parser().parse_args_and_config(args=argv)


def test_the_documented_full_finetune_command_turns_the_reference_kl_measurement_off(tmp_path):
    commands = _documented_full_finetune_commands()
    assert commands, "docs/recipes.md shows no full fine-tuning command (--use_peft false)"
    for argv in commands:
        _, training_args, model_args = _parse(argv, tmp_path)
        assert not model_args.use_peft
        assert training_args.reference_kl_logging_steps is None or training_args.beta > 0, argv


@pytest.mark.slow
@pytest.mark.parametrize("engine", [DistributedType.DEEPSPEED, DistributedType.FSDP])
def test_sharded_full_finetune_refusal_names_the_flag_that_works(tmp_path, monkeypatch, engine):
    argv = ["--config", "recipes/math-lora.yaml", "--use_peft", "false"]
    trainer = build_trainer(*_parse(argv, tmp_path))  # one CPU process: no refusal
    assert trainer.args.reference_kl_logging_steps == 10  # the recipe's value, kept when the flag is left off
    monkeypatch.setattr(trainer.accelerator.state, "distributed_type", engine)
    with pytest.raises(ValueError, match="reference_kl_logging_steps=10 with beta=0") as refusal:
        every = trainer.run_plan.feedback.reference_kl_logging_steps
        ReferenceKL(every, trainer.args.per_device_train_batch_size, trainer.beta, trainer.model, trainer.accelerator)
    flag = re.search(r"`(--reference_kl_logging_steps \S+)`", str(refusal.value)).group(1)
    _, fixed, _ = _parse([*argv, *flag.split()], tmp_path / "again")
    assert fixed.reference_kl_logging_steps is None
