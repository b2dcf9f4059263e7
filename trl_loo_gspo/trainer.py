"""``LooGspoTrainer``: TRL's ``GRPOTrainer`` plus LOO-GSPO's flags (docs/method.md).

The math lives in :mod:`trl_loo_gspo.core` and :mod:`trl_loo_gspo.step_accounting`; which code computes the loss
and the advantages is decided by :mod:`trl_loo_gspo.objective`. This module only wires them into TRL at small hooks
(listed, with the reasons, in ``docs/trl-compatibility.md``):

* ``_generate_and_score_completions`` is wrapped to replace TRL's advantages with the configured estimator over
  per-row group ids (unless ``advantage_estimator="trl"``) and to log the round's metrics;
* ``_prepare_inputs`` / ``training_step`` are wrapped to keep one :class:`StepAccounting` per optimizer step: the
  exact global loss denominator of our loss, the step's sums, the gradient correction when a step spans generation
  rounds;
* ``_compute_loss`` is ours for our loss (response-level clipped loss over the global denominator), else TRL's.

Dynamic sampling, process feedback, entropy feedback, the reference KL, registration and the Hub are mixins, each
in its own module.
"""

from __future__ import annotations

import inspect
import os
import time
import warnings
from typing import Any

import torch
from accelerate.utils import DistributedType, is_peft_model
from trl import GRPOConfig, GRPOTrainer

from . import core
from .budget import RolloutTokenBudget
from .config import LooGspoConfig
from .dynamic_sampling import DynamicSamplingMixin
from .entropy_feedback import EntropyFeedbackMixin
from .forward import ForwardMixin
from .launch import engine_warning, launch_error, requested_engine
from .loss_metrics import LossMetricsMixin
from .objective import TRL_ADVANTAGES
from .process_feedback import ProcessFeedbackMixin
from .publishing import PublishingMixin, merge_refusal
from .reference_kl import ReferenceKLMixin
from .reporting import RegistrationToTrackers, SummaryTable
from .run_checks import RunChecksMixin, check_dataset
from .run_state import RunStateCallback, saved_run_state
from .sampling_rows import generated_per_effective, loss_mask
from .step_accounting import IDX, SUM_STATS, StepAccounting

_GRPO_SIGNATURE = inspect.signature(GRPOTrainer.__init__)


def _default_args(model: Any) -> LooGspoConfig:
    if isinstance(model, str):
        name = model
    else:
        name = getattr(model.config, "_name_or_path", None) or type(model).__name__
    return LooGspoConfig(f"{str(name).rstrip('/').split('/')[-1]}-LooGspo")


class LooGspoTrainer(
    RunChecksMixin,
    ForwardMixin,
    LossMetricsMixin,
    PublishingMixin,
    ReferenceKLMixin,
    EntropyFeedbackMixin,
    ProcessFeedbackMixin,
    DynamicSamplingMixin,
    GRPOTrainer,
):
    """Drop-in replacement for ``trl.GRPOTrainer``: every ``GRPOConfig`` option works, and LOO-GSPO is what the flags
    of :class:`LooGspoConfig` add (docs/method.md).

    Same constructor as ``GRPOTrainer``; ``args`` must be a :class:`LooGspoConfig` (or ``None`` for defaults). With
    ``LooGspoConfig``'s defaults:

    * advantages come from ``args.advantage_estimator`` (leave-one-out), computed per prompt group from the gathered
      rewards; unscorable answers (a reward function returned ``None``) get 0 and stay out of the baseline;
    * the loss is ``ℓ_i = −min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i)`` with GSPO's geometric-mean ratio
      ``s_i``, aggregated by ``args.loss_aggregation`` over ONE global count of valid completion tokens per optimizer
      step, exact for any ``steps_per_generation`` / ``gradient_accumulation_steps`` and any number of ranks.

    With a TRL ``loss_type`` (and ``advantage_estimator="trl"``, its default then) TRL's own code computes both,
    and dynamic sampling, verifiers, entropy feedback, the token budget, registration and the card work on top.
    """

    _tag_names = ["trl", "grpo", "trl-loo-gspo", "rlvr"]
    _name = "LOO-GSPO"
    _paper: dict[str, str] = {}  # no single paper: the card lists the four sources (trl_loo_gspo.hub.SOURCES)
    _last_rewards_per_func: torch.Tensor | None = None

    def __init__(self, model: Any, reward_funcs: Any = None, args: LooGspoConfig | None = None, *rest, **kwargs):
        if args is None:
            args = _default_args(model)
        elif not isinstance(args, LooGspoConfig):
            kind = "a trl.GRPOConfig" if isinstance(args, GRPOConfig) else f"a {type(args).__name__}"
            raise TypeError(
                f"LooGspoTrainer needs args=LooGspoConfig(...), got {kind}. LooGspoConfig subclasses GRPOConfig and "
                "takes the same arguments: replace `GRPOConfig(` with `LooGspoConfig(` (from trl_loo_gspo)."
            )
        given = _GRPO_SIGNATURE.bind_partial(None, model, reward_funcs, args, *rest, **kwargs).arguments
        check_dataset(given.get("train_dataset"), "train_dataset", require_rows=True)  # before the model is loaded
        check_dataset(given.get("eval_dataset"), "eval_dataset", require_rows=False)
        # before Trainer.__init__, which creates the Hub repository: a refused run leaves nothing on the Hub
        lora = given.get("peft_config") is not None or (not isinstance(model, str) and is_peft_model(model))
        refusal = merge_refusal(args.hub_merge_adapter, lora, requested_engine(os.environ, args) is not None)
        if refusal is not None:
            raise ValueError(refusal)
        super().__init__(model, reward_funcs, args, *rest, **kwargs)
        self._init_run_checks()
        self._check_launch()
        self._check_runtime_support()
        self._check_merge_support()
        self._init_publishing()
        self._accounting = StepAccounting(args.steps_per_generation, self.num_iterations, self.accelerator.device)
        self._generation_time = 0.0  # cumulative seconds spent in generation + scoring
        self.generated_tokens_total = 0  # cumulative counters (saved with checkpoints)
        self.effective_tokens_total = 0
        self._init_sampling()
        self._init_process()
        self._kl_ref_model = self._reference_for_kl_logging()
        self._init_entropy_feedback()
        self.add_callback(RolloutTokenBudget(self))  # reads args.rollout_token_budget
        self.add_callback(RunStateCallback(self))
        self.add_callback(RegistrationToTrackers(self))
        if args.summary_table:
            self.add_callback(SummaryTable(self))

    # ------------------------------------------------------------------ setup checks
    def _check_launch(self) -> None:
        """Refuse a process group that would not train as one run; warn when a requested engine was not set up
        (the decisions are :mod:`trl_loo_gspo.launch`'s)."""
        accelerator = self.accelerator
        error = launch_error(
            int(os.environ.get("WORLD_SIZE", "1")), accelerator.num_processes, accelerator.distributed_type
        )
        if error is not None:
            raise RuntimeError(error)
        warning = engine_warning(requested_engine(os.environ, self.args), accelerator.distributed_type)
        if warning is not None and accelerator.is_main_process:
            warnings.warn(warning, stacklevel=3)

    def _check_runtime_support(self) -> None:
        rounds = self.args.steps_per_generation * self.num_iterations
        if not self.args.uses_own_loss or rounds % self.args.gradient_accumulation_steps == 0:
            return
        # When an optimizer step spans generation rounds, the global token count of the step is only known after
        # its last micro-batch: gradients are corrected in place before clipping (exact, since they are linear).
        if self.accelerator.distributed_type == DistributedType.DEEPSPEED:
            raise ValueError(
                "With DeepSpeed, gradient_accumulation_steps must divide steps_per_generation * num_iterations "
                f"(got {self.args.gradient_accumulation_steps} and {self.args.steps_per_generation} * "
                f"{self.num_iterations}): the exact global token denominator then needs a gradient rescale that "
                "DeepSpeed's engine does not expose. Set steps_per_generation to a multiple of "
                "gradient_accumulation_steps."
            )
        if self.aux_loss_enabled:
            raise ValueError(
                "With a MoE router auxiliary loss, gradient_accumulation_steps must divide steps_per_generation * "
                "num_iterations: the exact token denominator would otherwise rescale the auxiliary loss too. Set "
                "steps_per_generation to a multiple of gradient_accumulation_steps."
            )

    # ------------------------------------------------------------------ advantages (§2.2)
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        with self._checked_reward_funcs():  # outputs checked, naming the function (run_checks)
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._check_rewards(rewards_per_func)
        self._last_rewards_per_func = rewards_per_func  # gathered over all ranks, NaN = unscorable
        self._collect_signals(len(completions))  # §6 span signals, when process feedback is on
        return rewards_per_func

    def group_ids(self, num_rows: int, num_generations: int, device: torch.device) -> torch.Tensor:
        """Prompt-group id of each gathered row: the sampler's ids when it assembled the batch (groups may then
        differ in size), else row // K (TRL keeps each prompt's K answers contiguous)."""
        if self._batch_group_ids is not None and self._batch_group_ids.numel() == num_rows:
            return self._batch_group_ids.to(device)
        return torch.arange(num_rows, device=device) // num_generations

    def _generate_and_score_completions(self, inputs):
        start = time.perf_counter()
        self._last_rewards_per_func = None
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        rewards_per_func = self._last_rewards_per_func
        rewards = self._combined_rewards(rewards_per_func)
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        group_ids = self.group_ids(rewards.numel(), num_generations, self.accelerator.device)
        local_rows = output["prompt_ids"].size(0)
        if self.args.advantage_estimator == TRL_ADVANTAGES:
            all_advantages = self.accelerator.gather(output["advantages"])  # TRL's, for the round metrics
            advantages = output["advantages"]
        else:
            # §2.2 advantages over the gathered rewards and per-row group ids (stop-gradient)
            all_advantages = core.ADVANTAGE_ESTIMATORS[self.args.advantage_estimator](rewards, group_ids)
            first = self.accelerator.process_index * local_rows  # this rank's rows, as TRL slices them
            advantages = all_advantages[first : first + local_rows]
            output["advantages"] = advantages.to(output["advantages"].dtype)
            logged = self._logs["advantages"]  # a bounded deque: replace the entries TRL just appended
            for _ in range(min(all_advantages.numel(), len(logged))):
                logged.pop()
            logged.extend(all_advantages.tolist())
        self._process_token_advantages(output, rewards, group_ids)  # §6; no-op when α = 0
        self._log_round(mode, output, rewards_per_func, rewards, group_ids, all_advantages, advantages)
        if mode == "train":
            self._log_reference_kl(output)
        elapsed = time.perf_counter() - start
        self._generation_time += elapsed
        self._metrics[mode]["timing/generate_score_s"].append(elapsed)
        return output

    def _log_round(self, mode, output, rewards_per_func, rewards, group_ids, all_advantages, advantages) -> None:
        """Metrics of one generation round (one all-reduce for the token counts)."""
        mask = loss_mask(output)
        counts = torch.tensor([self._local_generated_tokens, 0.0, 0.0], dtype=torch.float64, device=mask.device)
        counts[1] = (mask.sum(-1) * (advantages != 0)).sum()
        counts[2] = mask.sum()
        generated, effective, valid = self.accelerator.reduce(counts, reduction="sum").tolist()
        self._local_generated_tokens = 0
        metrics = self._metrics[mode]
        signal = core.group_has_signal(rewards, group_ids, atol=self.args.signal_tolerance)
        metrics["groups/frac_with_signal"].append(signal.float().mean().item())
        scored = all_advantages[~torch.isnan(rewards)]
        metrics["advantages/mean"].append(scored.mean().item() if scored.numel() else 0.0)
        metrics["advantages/std"].append(scored.std().item() if scored.numel() > 1 else 0.0)
        pad = self._batch_pad_rows
        real = ~pad.to(rewards.device) if pad is not None and pad.numel() == rewards.numel() else None
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        if real is not None:  # padding rows are not answers: neither unscorable nor scored
            unscorable = unscorable & real
        metrics["rewards/frac_unscorable"].append(
            unscorable.sum().item() / max(int(real.sum()) if real is not None else unscorable.numel(), 1)
        )
        if self.args.adaptive_group_size and self._batch_group_ids is not None:
            # groups of different sizes: TRL's frac_reward_zero_std grouped the rows by num_generations
            frac = core.frac_rows_without_signal(rewards, group_ids, self.args.signal_tolerance, real)
            metrics["frac_reward_zero_std"][-1] = frac
        metrics["tokens/generated"].append(generated)
        metrics["tokens/valid"].append(valid)
        metrics["tokens/effective"].append(effective)
        if mode == "train":
            self.generated_tokens_total += int(generated)
            self.effective_tokens_total += int(effective)
            metrics["tokens/generated_total"] = [float(self.generated_tokens_total)]
            metrics["tokens/effective_total"] = [float(self.effective_tokens_total)]
            ratio = generated_per_effective(self.generated_tokens_total, self.effective_tokens_total)
            metrics["tokens/generated_per_effective"] = [ratio]

    # ------------------------------------------------------------------ optimizer steps (§3.3)
    def _count_column(self) -> int | None:
        """Column of the slice counts ``[tokens, answers]`` that is our loss's denominator; ``None`` for TRL's loss."""
        if not self.args.uses_own_loss:
            return None
        return 0 if self.args.loss_aggregation == "token_total" else 1

    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        previous = self._buffered_inputs
        inputs = super()._prepare_inputs(generation_batch)
        column = self._count_column()
        if column is not None and self._buffered_inputs is not previous:  # a new generation round was buffered
            local = torch.stack(
                [
                    torch.stack([m.sum(), (m.sum(-1) > 0).sum()]).to(torch.float64)
                    for m in (loss_mask(batch) for batch in self._buffered_inputs)
                ]
            )
            self._accounting.slice_counts = self.accelerator.reduce(local, reduction="sum")
        if self._accounting.micro == 0:
            self._accounting.begin(self._step, self.current_gradient_accumulation_steps, column)
        return inputs

    def training_step(self, model, inputs, num_items_in_batch):
        generation_before = self._generation_time
        start = time.perf_counter()
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._accounting.update_time += time.perf_counter() - start - (self._generation_time - generation_before)
        self._accounting.add_loss(loss)
        if self.accelerator.sync_gradients:
            loss = self._finish_optimizer_step(model, loss)
        return loss

    def _finish_optimizer_step(self, model, loss: torch.Tensor) -> torch.Tensor:
        """Close an optimizer step: the exact correction if needed, then the step's metrics (two all-reduces)."""
        step = self._accounting
        stats = self.accelerator.reduce(step.stats, reduction="sum")
        metrics = self._metrics["train"]
        column = self._count_column()
        if column is not None:
            extrema = self.accelerator.reduce(step.extrema, reduction="max")
            true_denominator = max(float(stats[IDX["tokens" if column == 0 else "answers"]]), 1.0)
            factor = step.correction(true_denominator)
            if factor != 1.0:  # only when the step spanned generation rounds
                # §3.3 exact denominator: rescale the gradients (linear) before clipping
                for param in model.parameters():
                    if param.grad is not None:
                        param.grad.mul_(factor)
                # The Trainer adds each micro-batch's returned loss to its running total: correct the step's sum.
                loss = loss + (factor - 1.0) * step.loss_sum
            self._log_loss_stats("train", stats, extrema)
            metrics["tokens/loss_denominator"].append(true_denominator)
        if self.args.entropy_feedback:
            self._update_entropy_feedback(float(stats[IDX["entropy_sum"]]) / max(float(stats[IDX["tokens"]]), 1.0))
        metrics["timing/update_s"].append(step.update_time)
        step.end()
        return loss

    # ------------------------------------------------------------------ run state (checkpoints)
    def run_state(self) -> dict[str, Any]:
        """The extra state a resumed run needs (saved by :class:`RunStateCallback` in ``trainer_state.json``)."""
        return {
            "generated_tokens_total": self.generated_tokens_total,
            "effective_tokens_total": self.effective_tokens_total,
            "sampling_counters": self.sampling_counters,
            "refill_sampler": None if self._refill is None else self._refill.state_dict(),
            "filtered_registry": self.filtered_registry,
            "entropy_feedback": self._entropy_feedback_state(),
            "kl_due_step": self.kl_due_step,
        }

    def load_run_state(self, state: dict[str, Any]) -> None:
        self.generated_tokens_total = int(state["generated_tokens_total"])
        self.effective_tokens_total = int(state["effective_tokens_total"])
        self.sampling_counters.update(state.get("sampling_counters", {}))
        self.kl_due_step = int(state.get("kl_due_step", 0))
        if state.get("entropy_feedback") is not None:
            self._load_entropy_feedback_state(state["entropy_feedback"])
        registry = state.get("filtered_registry") or {}
        self.filtered_registry = {int(index): record for index, record in registry.items()}
        if self._refill is not None and state.get("refill_sampler") is not None:
            self._refill.load_state_dict(state["refill_sampler"])

    def _load_optimizer_and_scheduler(self, checkpoint):
        # Runs after Trainer loaded trainer_state.json (and, if asked, rebuilt the callbacks from it).
        super()._load_optimizer_and_scheduler(checkpoint)
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, RunStateCallback):
                callback.trainer = self
        if checkpoint is not None:
            saved = saved_run_state(self.state.stateful_callbacks, checkpoint)
            if saved is not None:
                self.load_run_state(saved)

    # ------------------------------------------------------------------ loss (§3.2, §3.3)
    def _compute_loss(self, model, inputs):
        self._skip_rows = inputs.get("padding_rows")
        try:
            return self._trl_loss(model, inputs) if not self.args.uses_own_loss else self._own_loss(model, inputs)
        finally:
            self._skip_rows = None

    def _own_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        mask = loss_mask(inputs)
        per_token_logps, entropies, aux_loss = self._policy_logps(model, inputs)
        old_per_token_logps = inputs.get("old_per_token_logps")
        if old_per_token_logps is None:  # on-policy: TRL skips the extra forward pass
            old_per_token_logps = per_token_logps.detach()
        advantages = inputs["advantages"]
        if advantages.dim() != 1:
            raise ValueError(f"LooGspoTrainer expects advantages of shape (B,), got {tuple(advantages.shape)}")
        log_s = core.sequence_log_ratio(per_token_logps, old_per_token_logps, mask)
        guard = None
        if self.args.log_ratio_clamp is not None:
            log_s, guard = core.clamp_log_ratio(log_s, self.args.log_ratio_clamp)
        s = torch.exp(log_s)
        # §3.2 response-level clipped loss on s_i (after the optional §5.1 guard)
        losses = core.response_loss(s, advantages, self.epsilon_low, self.epsilon_high)
        extra = None  # per-token process term ℓ_i,t − ℓ_i; 0 wherever Â_i,t = Â_i
        process_advantages = inputs.get("process_advantages")
        # A micro-batch without any process advantage (α = 0, or a constant signal) takes the outcome-only path:
        # the same loss and gradient bit for bit (the per-token route would only reorder float sums).
        if process_advantages is not None and bool(process_advantages.any()):
            token_advantages = advantages.unsqueeze(1) + process_advantages
            # §6 response-level ratio with per-token advantages Â_i,t = Â_i + α Â^proc_i,t
            token_losses = core.token_response_loss(s, token_advantages, self.epsilon_low, self.epsilon_high)
            extra = token_losses - losses.unsqueeze(1)
        vllm_weights = self.use_vllm and self.vllm_importance_sampling_correction
        weights = inputs["importance_sampling_ratio"] if vllm_weights else None
        per_token_kl = None
        if self.beta != 0.0:
            per_token_kl = core.k3_kl(per_token_logps, inputs["ref_per_token_logps"])
            if self.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * s.unsqueeze(1)
        terms = None if per_token_kl is None else self.beta * per_token_kl
        loss = self._aggregate(core.row_losses(losses, mask, extra, weights, terms), mask, mode)
        if self.aux_loss_enabled:
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather(aux_loss.detach()).mean().item())
        fmask = mask.to(per_token_logps.dtype)
        self._accumulate_stats(mode, s, advantages, mask.sum(-1), fmask, entropies, per_token_kl, guard)
        return loss

    def _aggregate(self, rows: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
        """This rank's share of the loss over the global denominator of the optimizer step (eval: of the batch)."""
        lengths = mask.sum(-1)
        if mode == "train":
            denominator = self._accounting.denominator
        else:
            local = torch.stack([mask.sum(), (lengths > 0).sum()]).to(torch.float64)
            denominator = float(self.accelerator.reduce(local, reduction="sum")[self._count_column()])
        # Every rank contributes its share over the global denominator; DDP/FSDP average gradients (and the
        # eval loop averages losses) over ranks, hence the factor num_processes.
        scale = self.accelerator.num_processes
        if self.args.loss_aggregation == "token_total":
            # §3.3 this rank's share of Σ T_i ℓ_i / (global token count of the optimizer step)
            return core.token_total_aggregate(rows, lengths, denominator) * scale
        return core.sequence_mean_aggregate(rows, lengths, denominator) * scale

    def _trl_loss(self, model, inputs):
        """TRL computes the loss (``super()._compute_loss``); with entropy feedback, the step's token entropy sums
        are kept from the entropies TRL computes anyway."""
        capture = self.model.training and self.args.entropy_feedback
        self._entropy_capture = [] if capture else None
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            captured, self._entropy_capture = self._entropy_capture, None
        if captured:
            mask = loss_mask(inputs).to(torch.float64)
            stats = torch.zeros(len(SUM_STATS), dtype=torch.float64, device=mask.device)
            stats[IDX["tokens"]] = mask.sum()
            stats[IDX["entropy_sum"]] = (captured[-1].to(torch.float64) * mask).sum()
            self._accounting.add(stats)
        return loss
