"""Early, named errors for input that would otherwise fail far from its cause, and the words for a run that
trained nothing.

TRL reads ``row["prompt"]`` at the first generation (a bare ``KeyError: 'prompt'``), converts a reward function's
output with ``torch.tensor`` (``too many dimensions 'str'``; ``'NoneType' object is not iterable`` for a bare
``None``), quietly trains on an empty dataset, and treats NaN like ``None``. Here each case fails at construction or
at the first call, naming the dataset column or the reward function, and a run in which no answer carried a weight
says so at the end instead of looking like success. Plain Python: no library checks a reward function's contract.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import math
import numbers
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import DistributedType, is_peft_model
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_callable_name, is_async_callable

from ..config import LooGspoConfig
from ..verifiers.base import RewardOutput
from .launch import engine_warning, launch_error, requested_engine
from .publishing import merge_refusal
from .run_plan import RunPlan

logger = logging.getLogger(__name__)

#: Columns people name their prompts, for the suggestion when ``prompt`` is missing.
_PROMPT_LIKE = ("question", "problem", "query", "instruction", "input", "text", "messages", "conversation")


def check_dataset(dataset: Any, role: str, require_rows: bool, require_prompt: bool = True) -> None:
    """Refuse a dataset that cannot train: no ``prompt`` column (TRL reads ``row["prompt"]``; not required when an
    ``environment_factory`` may return the prompts from ``reset()``), or no rows.

    ``role`` names the argument in the message (``train_dataset``, ``eval_dataset['val']``). Datasets whose columns
    or length are unknown up front (streaming ``IterableDataset``) are not checked.
    """
    if dataset is None:
        return
    if isinstance(dataset, dict):
        for key, part in dataset.items():
            check_dataset(part, f"{role}[{key!r}]", require_rows, require_prompt)
        return
    columns = getattr(dataset, "column_names", None)
    if require_prompt and isinstance(columns, list) and "prompt" not in columns:
        guess = [c for c in columns if c in _PROMPT_LIKE] or difflib.get_close_matches("prompt", columns, n=1)
        hint = (
            f"; if {guess[0]!r} holds the prompts: {role} = {role.split('[')[0]}.rename_column({guess[0]!r}, 'prompt')"
            if guess
            else ""
        )
        raise ValueError(
            f"{role} has no 'prompt' column (columns: {', '.join(columns) or 'none'}). GRPOTrainer generates from "
            f"each row's 'prompt' (a string, or a list of chat messages){hint}. Every other column reaches the "
            "reward functions as a keyword argument."
        )
    if require_rows and hasattr(dataset, "__len__") and len(dataset) == 0:
        raise ValueError(f"{role} is empty (0 rows): there is nothing to train on.")


def _is_reward(value: Any) -> bool:
    if value is None or (isinstance(value, numbers.Real) and not isinstance(value, str)):
        return True
    return isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex


def _as_list(output: Any) -> list:
    """A reward function's output (list, tuple, NumPy array, tensor) as a list, without copying a list."""
    if isinstance(output, list):
        return output
    return output.tolist() if hasattr(output, "tolist") else list(output)


def check_reward_output(output: Any, name: str, expected: int) -> list:
    """Raise ``TypeError`` naming the reward function when its output is not one number (or ``None``) per completion;
    else return the output as a list.

    ``expected`` is the number of completions it was called with. Lengths are also checked by TRL; the message here
    is the same kind, for the cases TRL's conversion fails on first.
    """
    if output is None:
        raise TypeError(
            f"reward function {name!r} returned None instead of a list of {expected} rewards (one per completion). "
            f"Return [None] * len(completions) when none of them can be scored."
        )
    is_sequence = isinstance(output, (Sequence, torch.Tensor)) or hasattr(output, "__array__")
    if isinstance(output, (str, bytes)) or not is_sequence:
        raise TypeError(
            f"reward function {name!r} returned a {type(output).__name__}, not a list of {expected} rewards (one "
            "float, or None for 'cannot score', per completion)."
        )
    values = _as_list(output)
    if len(values) != expected:
        raise ValueError(
            f"reward function {name!r} returned {len(values)} rewards for {expected} completions: it must return "
            "exactly one per completion."
        )
    for index, value in enumerate(values):
        if not _is_reward(value):
            raise TypeError(
                f"reward function {name!r} returned {value!r} ({type(value).__name__}) for completion {index}: "
                "rewards must be numbers (float, int, bool), or None for an answer that cannot be scored"
                + (" — convert it with float()." if isinstance(value, str) else ".")
            )
    return values


@dataclass
class RewardTally:
    """Per reward function: how many completions it scored, returned ``None`` for, or returned NaN for."""

    calls: int = 0
    completions: int = 0
    none: int = 0
    nan: int = 0
    low: float = math.inf  # the smallest and largest scorable reward seen (equal: a constant reward)
    high: float = -math.inf

    def add(self, output: Any) -> None:
        values = _as_list(output)
        self.calls += 1
        self.completions += len(values)
        self.none += sum(v is None for v in values)
        scored = [float(v) for v in values if v is not None]
        self.nan += sum(math.isnan(v) for v in scored)
        finite = [v for v in scored if not math.isnan(v)]
        if finite:
            self.low, self.high = min(self.low, *finite), max(self.high, *finite)

    @property
    def constant(self) -> bool:
        """Some answer was scored, and every scored answer got the same reward."""
        return self.low == self.high


def _columns_note(kwargs: dict, error: BaseException) -> str:
    columns = ", ".join(sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric")))
    missing = re.search(r"argument: '(\w+)'|argument '(\w+)'", str(error))
    name = next((m for m in missing.groups() if m), None) if missing else None
    hint = f"; there is no column {name!r}" if name and name not in kwargs else ""
    return f"It receives the dataset's columns as keyword arguments: {columns}{hint}."


def _failing_row(func: Callable, args: tuple, kwargs: dict, rows: int) -> int | None:
    """The first row of the batch on which ``func`` raises when called on that row alone (None: none alone)."""
    for row in range(min(rows, 64)):  # (bounded: an expensive reward is not re-run on a whole large batch)
        single = {k: [v[row]] if isinstance(v, list) and len(v) == rows else v for k, v in kwargs.items()}
        try:
            func(*args, **single)
        except Exception:
            return row
    return None


def raised_reward_error(func: Callable, name: str, error: Exception, args: tuple, kwargs: dict) -> RuntimeError:
    """The error to raise when reward function ``name`` raised ``error``: the function, the row and the columns."""
    rows = len(kwargs.get("completions", ()))
    row = _failing_row(func, args, kwargs, rows)
    where = f"on row {row} of a batch of {rows}" if row is not None else f"on a batch of {rows} (no single row alone)"
    prompt = ""
    if row is not None and isinstance(kwargs.get("prompts"), list):
        prompt = f" (prompt {str(kwargs['prompts'][row])[:80]!r})"
    return RewardFunctionError(
        f"reward function {name!r} raised {type(error).__name__}: {error} {where}{prompt}. "
        + _columns_note(kwargs, error)
    )


class RewardFunctionError(RuntimeError):
    """A reward function raised; the message names it, the batch row and the columns it receives."""


def _after_call(output: Any, name: str, expected: int, tally: RewardTally) -> Any:
    values = check_reward_output(output, name, expected)
    before = tally.nan
    tally.add(values)
    if tally.nan and not before:
        logger.warning(
            f"reward function {name!r} returned NaN for {tally.nan} of {tally.completions} completions so far: NaN "
            "is treated like None (the answer cannot be scored, gets weight 0 and stays out of its group's "
            "baseline). Return None deliberately, or a finite number."
        )
    return output


class RewardOutputs:
    """The :class:`~trl_loo_gspo.verifiers.base.RewardOutput` of each reward function in *one* reward call, by its
    index in ``reward_funcs``: a fresh one per call (:meth:`RewardChecks.checked`), so what a verifier
    returned travels with the call that produced it (process feedback reads the per-answer results from here)."""

    def __init__(self) -> None:
        self._by_index: dict[int, RewardOutput] = {}

    def recorder(self, index: int, name: str) -> Callable[[RewardOutput], None]:
        def record(output: RewardOutput) -> None:
            if index in self._by_index:
                raise RuntimeError(
                    f"reward function {name!r} was called twice in one reward call: its per-answer results would be "
                    "ambiguous"
                )
            self._by_index[index] = output

        return record

    def get(self, index: int) -> RewardOutput | None:
        """The output of reward function ``index`` in this call (``None``: not called, or no ``score_batch``)."""
        return self._by_index.get(index)


def checked_reward(
    func: Callable, name: str, tally: RewardTally, record: Callable[[RewardOutput], None] | None = None
) -> Callable:
    """``func`` with its output checked and tallied (same sync/async kind, so TRL dispatches it the same way).

    With ``record``, a synchronous ``func`` that offers ``score_batch`` (every verifier, ``ShapedReward``) is called
    through it: TRL gets the scores, ``record`` the whole output (scores and per-answer results)."""
    if is_async_callable(func):

        @functools.wraps(func)
        async def checked_async(*args, **kwargs):
            output = await func(*args, **kwargs)
            return _after_call(output, name, len(kwargs.get("completions", ())), tally)

        return checked_async

    score_batch = getattr(func, "score_batch", None) if record is not None else None

    @functools.wraps(func)
    def checked(*args, **kwargs):
        try:
            if callable(score_batch):
                full = score_batch(*args, **kwargs)
                record(full)
                output = list(full.scores)
            else:
                output = func(*args, **kwargs)
        except Exception as error:
            raise raised_reward_error(func, name, error, args, kwargs) from error
        return _after_call(output, name, len(kwargs.get("completions", ())), tally)

    return checked


def nothing_trained_reason(
    global_step: int,
    effective_tokens: int,
    log_history: list[dict[str, Any]],
    tallies: dict[str, RewardTally],
    padding: str | None = None,
) -> str | None:
    """Why a finished run moved the policy on no answer (``None`` when some answer had a non-zero weight).

    ``effective_tokens`` counts the valid tokens of answers with a non-zero advantage over the run; ``padding``
    describes the dynamic-sampling limits when batches were padded (``None`` when no row was padding).
    """
    if global_step == 0:
        return "no optimizer step was taken (an empty dataset, max_steps=0, or a budget already spent)"
    if effective_tokens > 0:
        return None
    unscorable = [e["rewards/frac_unscorable"] for e in log_history if "rewards/frac_unscorable" in e]
    # the logged fraction (all ranks) when a step was logged; else this rank's tallies (a short run logs nothing)
    every_function_unscorable = bool(tallies) and all(t.none + t.nan == t.completions for t in tallies.values())
    if (min(unscorable) >= 1.0) if unscorable else every_function_unscorable:
        named = ", ".join(
            f"{name!r} returned None/NaN for {t.none + t.nan} of {t.completions}" for name, t in tallies.items()
        )
        return f"every answer was unscorable ({named or 'every reward function returned None'})"
    constant = [(name, t) for name, t in tallies.items() if t.constant]
    if tallies and len(constant) == len(tallies):  # more rounds or prompts cannot help: the reward never varies
        named = ", ".join(f"{name!r} returned {t.low:g} for every scored answer" for name, t in constant)
        return (
            f"the reward is constant over every group ({named}), so no group can carry a comparison signal and "
            "more sampling (max_sampling_rounds, prompts) cannot help: check the reward function and the column "
            "it compares against"
        )
    if padding is not None:
        # groups kept by dynamic sampling carry a signal, so a run with padding that trained nothing was all padding
        return (
            f"every batch was dynamic-sampling padding: {padding} found no group with a comparison signal to "
            "train on (padding rows carry no weight). Raise max_sampling_rounds, or check the task's difficulty"
        )
    return (
        "every answer got advantage 0: within each group all answers had the same reward, so no group carried a "
        "comparison signal (too easy or too hard a task for this policy, or a reward that does not vary; "
        "dynamic_sampling=True drops such groups and draws new prompts)"
    )


class NothingTrainedWarning(TrainerCallback):
    """At the end of training, say plainly when no answer carried a weight (main process only). ``reason()``: why
    the run trained nothing, or ``None`` (the trainer's ``nothing_trained``)."""

    def __init__(self, reason: Callable[[], str | None]) -> None:
        self.reason = reason

    def on_train_end(self, args, state, control, **kwargs):
        reason = self.reason()
        if reason and state.is_world_process_zero:
            logger.warning(f"This run trained nothing: {reason}.")
        return control


_GRPO_SIGNATURE = inspect.signature(GRPOTrainer.__init__)


def checked_construction(model: Any, reward_funcs: Any, args: Any, rest: tuple, kwargs: dict) -> Any:
    """What ``LooGspoTrainer(...)`` refuses before TRL loads the model: args that are not a ``LooGspoConfig`` (or
    ``None``: the defaults, returned), datasets without rows or prompts, and a merged Hub push it cannot make
    (before ``Trainer.__init__``, which creates the Hub repository: a refused run leaves nothing on the Hub)."""
    if args is None:
        name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", None)
        args = LooGspoConfig(f"{str(name or type(model).__name__).rstrip('/').split('/')[-1]}-LooGspo")
    elif not isinstance(args, LooGspoConfig):
        kind = "a trl.GRPOConfig" if isinstance(args, GRPOConfig) else f"a {type(args).__name__}"
        raise TypeError(
            f"LooGspoTrainer needs args=LooGspoConfig(...), got {kind}. LooGspoConfig subclasses GRPOConfig and "
            "takes the same arguments: replace `GRPOConfig(` with `LooGspoConfig(` (from trl_loo_gspo)."
        )
    given = _GRPO_SIGNATURE.bind_partial(None, model, reward_funcs, args, *rest, **kwargs).arguments
    prompts = given.get("environment_factory") is None  # an environment may own the prompts, as TRL allows
    check_dataset(given.get("train_dataset"), "train_dataset", require_rows=True, require_prompt=prompts)
    check_dataset(given.get("eval_dataset"), "eval_dataset", require_rows=False, require_prompt=prompts)
    lora = given.get("peft_config") is not None or (not isinstance(model, str) and is_peft_model(model))
    plan = RunPlan.resolve(args, num_generations=args.num_generations)  # the run's one resolution of the config
    refusal = merge_refusal(plan.records.hub_merge_adapter, lora, requested_engine(os.environ, args) is not None)
    if refusal is not None:
        raise ValueError(refusal)
    return args, plan


def check_setup(
    plan: RunPlan, args: Any, accelerator: Any, model: Any, num_iterations: int, aux_loss: bool, fsdp: bool
) -> None:
    """What ``LooGspoTrainer`` refuses (or warns about) once TRL has set the run up, from its values: the launch
    (:func:`check_launch`), what the exact denominator cannot support (:func:`check_runtime_support`), and a merged
    Hub push of a model that is not a LoRA adapter or is sharded (:func:`merge_refusal`, on what was really set up;
    ``fsdp``: FSDP is enabled)."""
    check_launch(accelerator, requested_engine(os.environ, args))
    engine = accelerator.distributed_type
    rounds = args.steps_per_generation * num_iterations
    check_runtime_support(plan.objective, rounds, args.gradient_accumulation_steps, engine, aux_loss)
    lora = is_peft_model(accelerator.unwrap_model(model))
    refusal = merge_refusal(plan.records.hub_merge_adapter, lora, fsdp or engine == DistributedType.DEEPSPEED)
    if refusal is not None:
        raise ValueError(refusal)


def check_launch(accelerator: Any, requested: Any) -> None:
    """Refuse a process group that would not train as one run; warn when the ``requested`` engine
    (:func:`~trl_loo_gspo.trainer.launch.requested_engine`) was not set up on ``accelerator`` (the decisions are
    :mod:`trl_loo_gspo.trainer.launch`'s)."""
    error = launch_error(
        int(os.environ.get("WORLD_SIZE", "1")), accelerator.num_processes, accelerator.distributed_type
    )
    if error is not None:
        raise RuntimeError(error)
    warning = engine_warning(requested, accelerator.distributed_type)
    if warning is not None and accelerator.is_main_process:
        warnings.warn(warning, stacklevel=3)


def check_runtime_support(objective: Any, rounds: int, accumulation: int, engine: Any, aux_loss: bool) -> None:
    """Refuse what the exact global denominator cannot support when an optimizer step spans generation rounds
    (``rounds``: steps_per_generation × num_iterations; ``accumulation``: gradient_accumulation_steps; ``engine``:
    the accelerator's distributed type; ``aux_loss``: a MoE router auxiliary loss is on)."""
    if not objective.uses_own_loss or rounds % accumulation == 0:
        return
    # When an optimizer step spans generation rounds, the global token count of the step is only known after
    # its last micro-batch: gradients are corrected in place before clipping (exact, since they are linear).
    if engine == DistributedType.DEEPSPEED:
        raise ValueError(
            "With DeepSpeed, gradient_accumulation_steps must divide steps_per_generation * num_iterations "
            f"(got {accumulation} and {rounds}): the exact global token "
            "denominator then needs a gradient rescale that DeepSpeed's engine does not expose. Set "
            "steps_per_generation to a multiple of gradient_accumulation_steps."
        )
    if aux_loss:
        raise ValueError(
            "With a MoE router auxiliary loss, gradient_accumulation_steps must divide steps_per_generation * "
            "num_iterations: the exact token denominator would otherwise rescale the auxiliary loss too. Set "
            "steps_per_generation to a multiple of gradient_accumulation_steps."
        )


class RewardChecks:
    """Reward outputs checked and tallied per function, infinite rewards refused, one warning when a whole batch is
    unscorable, and :meth:`nothing_trained` for the end of the run (a component of ``LooGspoTrainer``; it holds no
    trainer: the trainer hands TRL the :meth:`checked` list for one reward call)."""

    def __init__(self, num_funcs: int) -> None:
        self.tallies = [RewardTally() for _ in range(num_funcs)]
        self._warned_unscorable = False

    def checked(self, reward_funcs: list, outputs: RewardOutputs) -> list:
        """Checked versions of ``reward_funcs`` recording into ``outputs``, for one reward call (the tallies are reset
        when the list was replaced by one of another length after construction)."""
        current = list(reward_funcs)
        if len(self.tallies) != len(current):
            self.tallies = [RewardTally() for _ in current]
        checked = []
        for index, (func, tally) in enumerate(zip(current, self.tallies, strict=True)):
            if not isinstance(func, torch.nn.Module):
                name = get_callable_name(func)
                func = checked_reward(func, name, tally, outputs.recorder(index, name))
            checked.append(func)
        return checked

    def check_rewards(self, rewards_per_func: torch.Tensor, names: list[str]) -> None:
        """Refuse infinite rewards (they would turn the weights into NaN at the first update and fail far from their
        cause), naming the function (``names``: the reward functions' names); warn once when no answer of a batch
        could be scored. Runs on the gathered rewards, so every rank decides alike."""
        infinite = torch.isinf(rewards_per_func)
        if bool(infinite.any()):
            column = int(infinite.any(dim=0).nonzero()[0])
            rows = infinite[:, column].nonzero().flatten().tolist()
            raise ValueError(
                f"reward function {names[column]!r} returned an infinite reward for "
                f"{len(rows)} of {rewards_per_func.size(0)} completions (first: row {rows[0]} of the gathered batch, "
                f"value {float(rewards_per_func[rows[0], column])}). Rewards must be finite floats, or None for an "
                "answer that cannot be scored."
            )
        if not self._warned_unscorable and rewards_per_func.numel() and bool(torch.isnan(rewards_per_func).all()):
            self._warned_unscorable = True
            logger.warning(
                f"No completion of this batch ({rewards_per_func.size(0)} answers) could be scored: "
                + "; ".join(self._tally_lines(names))
                + ". Unscorable answers get weight 0: nothing is learned from this batch."
            )

    def _tally_lines(self, names: list[str]) -> list[str]:
        return [
            f"reward function {name!r} returned None for {t.none} and NaN for {t.nan} of {t.completions} completions"
            for name, t in zip(names, self.tallies, strict=False)
            if t.completions
        ]

    def nothing_trained(
        self,
        sampling: Any,
        names: list[str],
        global_step: int,
        log_history: list,
        effective_tokens: int,
        padded_rows: int,
    ) -> str | None:
        """Why this run moved the policy on no answer, or ``None`` when some answer carried a weight (``sampling``:
        the run plan's :class:`~trl_loo_gspo.trainer.sampling_plan.SamplingPlan`)."""
        tallies = {name: t for name, t in zip(names, self.tallies, strict=False) if t.completions}
        padding = None
        if sampling.dynamic_sampling and padded_rows > 0:
            padding = f"max_sampling_rounds={sampling.max_sampling_rounds}"
            if sampling.probe_generations:
                padding += f" with the two-stage probe (probe_generations={sampling.probe_generations})"
        return nothing_trained_reason(global_step, effective_tokens, log_history, tallies, padding)
