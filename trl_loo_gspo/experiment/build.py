"""From a ``trl-loo-gspo train`` recipe to a trainer: TRL's GRPO script conventions with LooGspoTrainer, a verifier and
independent validation (the command itself is :mod:`trl_loo_gspo.cli.train`).

Parses three dataclasses with ``trl.TrlParser`` from ``--config recipe.yaml`` plus command-line overrides, exactly
like ``trl grpo``: :class:`LooGspoScriptArguments` (task, data, verifier, validation), :class:`LooGspoConfig`
(training) and ``trl.ModelConfig`` (model, dtype, LoRA). Then: load and map the data
(:mod:`trl_loo_gspo.experiment.data`), build the task's verifier (optionally shaped), build ``LooGspoTrainer`` with
``get_peft_config(model_args)``, evaluate the validation split at rollout-token checkpoints, train, save, and push to
the Hub when ``push_to_hub`` is set.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

from trl import ModelConfig, ScriptArguments

from ..config import LooGspoConfig

TASKS = ("math", "code", "proofs")


@dataclass
class LooGspoScriptArguments(ScriptArguments):
    """Task, data, verifier and validation arguments of ``trl-loo-gspo train`` (TRL's ``ScriptArguments`` plus ours).

    ``dataset_name`` is a Hub dataset id or a local file / directory; ``dataset_train_split`` and
    ``dataset_test_split`` name the splits; the test split is the independent validation set (or, when it does not
    exist, ``validation_size`` rows are held out of the training split, no prompt on both sides).
    """

    task: str = field(default="math", metadata={"help": f"Verifier and column contract: one of {TASKS}."})
    dataset_mapper: str = field(
        default="auto",
        metadata={
            "help": "Row mapping to the column contract: auto (from the columns), gsm8k, math, math500, mbpp, "
            "humaneval, coq, identity, or a dotted import path to your own function (see docs/data.md)."
        },
    )
    dataset_revision: str | None = field(default=None, metadata={"help": "Dataset revision (commit) on the Hub."})
    validation_size: float = field(
        default=0.0,
        metadata={
            "help": "When dataset_test_split does not exist: hold out this many rows (>= 1) or this fraction (< 1) "
            "of the training split for validation. 0: no validation."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation rows."})
    system_prompt: str | None = field(default=None, metadata={"help": "A system message for conversational prompts."})
    prompt_format: str = field(
        default="auto",
        metadata={
            "help": "conversational (chat messages; needs a chat template), plain (text), or auto: conversational "
            "when the tokenizer has a chat template."
        },
    )
    eval_every_tokens: int = field(
        default=0,
        metadata={
            "help": "Evaluate the validation split every N generated (rollout) tokens, and before training: pass@1 "
            "(greedy) and the sampled pass rate (method §5.2). 0: off."
        },
    )
    eval_samples: int = field(default=4, metadata={"help": "Sampled answers per validation problem."})
    eval_temperature: float = field(default=1.0, metadata={"help": "Temperature of the sampled validation answers."})
    verifier_timeout: float | None = field(
        default=None, metadata={"help": "Seconds per check (code: per sandbox run; proofs: per coqc run)."}
    )
    code_partial_credit: bool = field(
        default=False, metadata={"help": "Code: score the fraction of tests passed instead of all-or-nothing."}
    )
    coq_allowed_axioms: list[str] | None = field(
        default=None, metadata={"help": "Proofs: axioms a proof may depend on (default: none; the proof is closed)."}
    )
    overlong_penalty: float = field(
        default=0.0, metadata={"help": "λ_len of the soft overlong penalty (TRL's, DAPO §3); 0 = off."}
    )
    overlong_buffer: int = field(
        default=0, metadata={"help": "L_cache: the overlong penalty ramps over the last N tokens of the limit."}
    )
    hack_penalty: float = field(
        default=0.0, metadata={"help": "λ_hack of the reward-hacking penalty (the verifier's detector); 0 = off."}
    )
    extra_reward_funcs: list[str] | None = field(
        default=None,
        metadata={"help": "More reward functions as dotted import paths (e.g. my_lib.rewards.format_reward)."},
    )
    plugins: list[str] | None = field(
        default=None,
        metadata={
            "help": "Python modules to import before the training config is checked (e.g. my_lib.losses): each may "
            "register a policy loss, an aggregation or an advantage estimator with trl_loo_gspo.algorithms' "
            "decorators, which policy_loss, loss_aggregation and advantage_estimator can then name."
        },
    )

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)  # TRL's ScriptArguments may grow one
        if parent is not None:
            parent()
        # The parser builds these arguments before the LooGspoConfig (make_parser's order), whose check resolves
        # policy_loss / loss_aggregation / advantage_estimator against the registries: import the plugins first.
        for module in self.plugins or []:
            importlib.import_module(module)
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.prompt_format not in ("auto", "conversational", "plain"):
            raise ValueError(f"prompt_format must be auto, conversational or plain, got {self.prompt_format!r}")
        if self.validation_size < 0 or self.eval_every_tokens < 0 or self.eval_samples < 0:
            raise ValueError("validation_size, eval_every_tokens and eval_samples must be >= 0")


def make_parser(prog: str = "trl-loo-gspo train"):
    """The ``TrlParser`` over (script arguments, ``LooGspoConfig``, ``ModelConfig``), with a grouped ``--help``."""
    from .parser import TrainParser

    return TrainParser(LooGspoScriptArguments, LooGspoConfig, prog=prog)


def missing_required(script_args: LooGspoScriptArguments, model_args: ModelConfig) -> str | None:
    """What a run needs and was not given (in the recipe or on the command line), as one message; else ``None``."""
    missing = [
        f"--{name} ({what})"
        for name, value, what in (
            ("model_name_or_path", model_args.model_name_or_path, "a Hub id or a local directory"),
            ("dataset_name", script_args.dataset_name, "a Hub dataset id or a local file/directory"),
        )
        if not value
    ]
    if not missing:
        return None
    return (
        f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required, in the recipe or on the command "
        "line; e.g. trl-loo-gspo train --config recipes/math-lora.yaml"
    )


def build_verifier(script_args: LooGspoScriptArguments, emit_spans: bool = False):
    """The task's verifier (the one validation uses) — unshaped. ``emit_spans``: also return the method §6 span signals
    (process feedback); the code and proof verifiers have them, the math verifier does not (a clear error)."""
    from ..verifiers import CodeVerifier, CoqVerifier, MathVerifier

    timeout = script_args.verifier_timeout
    if script_args.task == "math":
        if emit_spans:
            raise ValueError(
                "process_advantage_coef > 0 needs span signals, and the math verifier has none (it checks the final "
                "answer only): use task code or proofs, or a reward function of your own that emits spans."
            )
        return MathVerifier() if timeout is None else MathVerifier(timeout_seconds=max(1, int(timeout)))
    if script_args.task == "code":
        return CodeVerifier(partial_credit=script_args.code_partial_credit, timeout_s=timeout, emit_spans=emit_spans)
    kwargs: dict[str, Any] = {"allowed_axioms": tuple(script_args.coq_allowed_axioms or ()), "emit_spans": emit_spans}
    if timeout is not None:
        kwargs["timeout"] = timeout
    return CoqVerifier(**kwargs)


def build_reward_funcs(script_args: LooGspoScriptArguments, verifier, training_args: LooGspoConfig) -> list:
    """The verifier (shaped when a penalty is on) plus any extra reward functions named by import path."""
    from ..verifiers.shaping import ShapedReward

    reward = verifier
    if script_args.overlong_penalty > 0 or script_args.hack_penalty > 0:
        reward = ShapedReward(
            verifier,
            lambda_len=script_args.overlong_penalty,
            max_completion_length=training_args.max_completion_length,
            soft_punish_cache=script_args.overlong_buffer,
            lambda_hack=script_args.hack_penalty,
        )
    funcs = [reward]
    for path in script_args.extra_reward_funcs or []:
        module, _, name = path.rpartition(".")
        if not module:
            raise ValueError(f"extra_reward_funcs entries are dotted import paths, got {path!r}")
        sys.path.insert(0, os.getcwd())
        funcs.append(getattr(importlib.import_module(module), name))
    return funcs


def load_splits(script_args: LooGspoScriptArguments, conversational: bool, seed: int):
    """(train, validation or None) in the column contract; validation never shares a prompt with train."""
    from .data import load_task_dataset, split_validation

    if not script_args.dataset_name:
        raise ValueError("dataset_name is required: a Hub dataset id or a local file/directory (see docs/data.md)")
    common = dict(
        task=script_args.task,
        mapper=script_args.dataset_mapper,
        config=script_args.dataset_config,
        revision=script_args.dataset_revision,
        system_prompt=script_args.system_prompt,
        conversational=conversational,
    )
    try:
        train = load_task_dataset(script_args.dataset_name, split=script_args.dataset_train_split, **common)
    except (ConnectionError, OSError) as err:  # a Hub dataset offline and not in datasets' cache (HF_HUB_OFFLINE)
        if os.path.exists(script_args.dataset_name):
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ValueError(
            f"dataset_name={script_args.dataset_name!r} could not be loaded ({type(err).__name__}: {first}): use a "
            "local file instead (--dataset_name <file.jsonl>; `trl-loo-gspo local-setup DIR` writes one and prints "
            "the command, docs/recipes.md section 5)"
        ) from err
    validation = None
    if not os.path.isfile(script_args.dataset_name):  # one file is one split: any split name would load it again
        try:
            validation = load_task_dataset(
                script_args.dataset_name,
                split=script_args.dataset_test_split,
                max_rows=script_args.max_eval_samples,
                **common,
            )
        except (ValueError, KeyError):  # no such split
            validation = None
    if validation is None and script_args.validation_size > 0:
        size = script_args.validation_size
        train, validation = split_validation(train, int(size) if size >= 1 else size, seed=seed)
        if script_args.max_eval_samples is not None:
            validation = validation.select(range(min(script_args.max_eval_samples, len(validation))))
    if script_args.max_train_samples is not None:
        train = train.select(range(min(script_args.max_train_samples, len(train))))
    return train, validation


def build_trainer(
    script_args: LooGspoScriptArguments, training_args: LooGspoConfig, model_args: ModelConfig, trainer_cls=None
):
    """Everything ``train`` does before ``trainer.train()``: returns the trainer (validation callback attached).

    ``trainer_cls`` (default ``LooGspoTrainer``) lets ablations build the stock-TRL baseline from the same recipe.
    """
    from transformers import AutoTokenizer
    from trl import get_peft_config, get_quantization_config

    from ..trainer import LooGspoTrainer
    from ..trainer.run_plan import RunPlan
    from ..trainer.validation import ValidationCallback

    if not model_args.model_name_or_path:
        raise ValueError("model_name_or_path is required (a Hub id or a local directory)")
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        padding_side="left",
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if script_args.prompt_format == "auto":
        conversational = tokenizer.chat_template is not None
    else:
        conversational = script_args.prompt_format == "conversational"
        if conversational and tokenizer.chat_template is None:
            raise ValueError("prompt_format=conversational needs a tokenizer with a chat template")
    train, validation = load_splits(script_args, conversational, seed=training_args.seed)

    model_init_kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    quantization = get_quantization_config(model_args)
    if quantization is not None:
        model_init_kwargs["quantization_config"] = quantization
    model_init_kwargs.update(training_args.model_init_kwargs or {})
    training_args.model_init_kwargs = model_init_kwargs
    if getattr(training_args, "experiment_task", "") is None:
        training_args.experiment_task = script_args.task

    if validation is None and script_args.eval_every_tokens:
        warnings.warn(
            f"eval_every_tokens={script_args.eval_every_tokens} but there is no validation split (no split "
            f"{script_args.dataset_test_split!r} and validation_size=0): nothing will be evaluated.",
            stacklevel=2,
        )
    feedback = RunPlan.resolve(training_args).feedback  # None for a stock GRPOConfig (a baseline run)
    verifier = build_verifier(script_args, emit_spans=feedback is not None and feedback.process.on)
    trainer = (trainer_cls or LooGspoTrainer)(
        model=model_args.model_name_or_path,
        reward_funcs=build_reward_funcs(script_args, verifier, training_args),
        args=training_args,
        train_dataset=train,
        eval_dataset=validation,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    trainer.data_source = {
        "dataset_name": script_args.dataset_name,
        "dataset_config": script_args.dataset_config,
        "revision": script_args.dataset_revision,
        "train_split": script_args.dataset_train_split,
        "validation_split": script_args.dataset_test_split if validation is not None else None,
        "validation_size": script_args.validation_size,
        "mapper": script_args.dataset_mapper,
        "prompt_format": "conversational" if conversational else "plain",
    }
    if script_args.eval_every_tokens and validation is not None:
        trainer.add_callback(
            ValidationCallback(
                trainer,
                validation,
                verifier,
                script_args.eval_every_tokens,
                samples=script_args.eval_samples,
                temperature=script_args.eval_temperature,
                seed=training_args.seed,
            )
        )
    return trainer


def check_output_dir(output_dir: str) -> None:
    """Raise ``OSError`` naming ``output_dir`` when it cannot be created or written (before any model is loaded)."""
    import uuid

    try:
        os.makedirs(output_dir, exist_ok=True)
        probe = os.path.join(output_dir, f".write-check-{uuid.uuid4().hex[:8]}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise OSError(f"output_dir {output_dir} cannot be written ({reason}): choose another --output_dir") from error


def _hub_unreachable(timeout: float = 10.0) -> str | None:
    """One request to the Hub endpoint (``HF_ENDPOINT``, proxies as the Hub client uses them): None when it answered,
    else why not. ``HF_HUB_OFFLINE`` set: not tried."""
    from huggingface_hub import constants, get_session

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception as error:  # any transport failure: DNS, refused, timeout, proxy, TLS
        return f"{constants.ENDPOINT} cannot be reached: {' '.join(str(error).split()) or type(error).__name__}"
    return None


def _model_cached(name: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str)
    except Exception:  # not a valid repo id
        return False


def _go_offline() -> None:
    """Hub clients (huggingface_hub, transformers, datasets) stop trying the network for the rest of the run."""
    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = True
    try:
        import datasets.config

        datasets.config.HF_HUB_OFFLINE = True
    except (ImportError, AttributeError):  # pragma: no cover
        pass


def check_reachable(script_args: LooGspoScriptArguments, model_args: ModelConfig) -> None:
    """A Hub model or dataset (not a local path) when the Hub cannot be reached: one request, then a
    ``ValueError`` naming the field and the local alternative, unless the model is in the local Hub cache (then the
    run goes on offline, from the cache, and says so). Respects ``HF_HUB_OFFLINE``."""
    remote = [
        (name, value)
        for name, value in (
            ("model_name_or_path", model_args.model_name_or_path),
            ("dataset_name", script_args.dataset_name),
        )
        if value and not os.path.exists(value)
    ]
    if not remote:
        return
    reason = _hub_unreachable()
    if reason is None:
        return
    local = {
        "model_name_or_path": "--model_name_or_path <model folder>",
        "dataset_name": "--dataset_name <file.jsonl>",
    }
    blocked = [
        (name, value)
        for name, value in remote
        if not (name == "model_name_or_path" and _model_cached(value, model_args.model_revision))
        and not (name == "dataset_name" and os.environ.get("HF_HUB_OFFLINE"))  # datasets reads its own cache then
    ]
    if blocked:
        fields = " and ".join(f"{name}={value!r}" for name, value in blocked)
        fixes = " and ".join(local[name] for name, _ in blocked)
        raise ValueError(
            f"{fields} {'is a Hub id' if len(blocked) == 1 else 'are Hub ids'} not in the local cache, and {reason}: "
            f"use local files instead ({fixes}; `trl-loo-gspo local-setup DIR` writes a tiny model and a data file "
            "and prints the command, docs/recipes.md section 5)"
        )
    _go_offline()
    print(f"Note: {reason}; using the Hub's local cache for {', '.join(v for _, v in remote)}.", file=sys.stderr)


def finish(trainer, script_args: LooGspoScriptArguments, training_args: LooGspoConfig) -> None:
    """After training: save with the model card, push (if ``push_to_hub``), and end the accelerator's trackers and
    process group. The card is the documented one (TRL's, with the method, its flags, the validation figures and the
    registration record appended: ``LooGspoTrainer.create_model_card``), written over the blank template a PEFT
    adapter's ``save_pretrained`` leaves in the folder."""
    local = os.path.exists(script_args.dataset_name)  # the card links Hub datasets only
    dataset_name = None if local else script_args.dataset_name
    if training_args.push_to_hub:  # push_to_hub saves the model and writes the card first (one upload, not two)
        trainer.push_to_hub(dataset_name=dataset_name)
        trainer.accelerator.print(f"Saved to {training_args.output_dir} and pushed to the Hub: {trainer.hub_model_id}")
    else:
        trainer.save_model(training_args.output_dir)
        trainer.create_model_card(dataset_name=dataset_name)  # (main process only, as TRL writes it)
        trainer.accelerator.print(f"Model and card saved to {training_args.output_dir}")
    # Finish the trackers and destroy the process group (all that ``Trainer.end``, transformers >= 5.18, does): a gloo
    # process that exits with the group alive can abort at interpreter exit after a finished run.
    trainer.accelerator.end_training()


def run(script_args: LooGspoScriptArguments, training_args: LooGspoConfig, model_args: ModelConfig):
    """Train, save, push (if ``push_to_hub``); returns the trainer."""
    trainer = build_trainer(script_args, training_args, model_args)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    finish(trainer, script_args, training_args)
    return trainer
