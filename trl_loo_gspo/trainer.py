"""``LooGspoTrainer``: TRL's ``GRPOTrainer`` with leave-one-out advantages, response-level clipping and a global
token-total loss denominator.

The math lives in :mod:`trl_loo_gspo.core`; this module only wires it into TRL at small hooks (listed, with the
reasons, in ``docs/trl-compatibility.md``):

* ``_calculate_rewards`` is wrapped to capture the gathered rewards; ``_generate_and_score_completions`` is wrapped
  to replace TRL's advantages with the configured estimator computed over per-row group ids.
* ``_prepare_inputs`` is wrapped to count the valid tokens of each buffered micro-batch once per generation round
  (one all-reduce) and to fix the loss denominator of each optimizer step.
* ``_compute_loss`` is ours: response-level clipped loss over the global denominator.
* ``training_step`` is wrapped to close an optimizer step: exact gradient rescaling when the step spans several
  generation rounds, and one all-reduce of the step's metrics.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from typing import Any

import torch
from accelerate.utils import DistributedType, is_peft_model
from datasets import IterableDataset
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import use_adapter

from . import core
from .budget import RolloutTokenBudget
from .config import LooGspoConfig
from .controllers import EntropyControllerState, entropy_controller_step
from .dynamic_sampling import DynamicSamplingMixin, generated_per_effective
from .hub import card_sections
from .process_feedback import ProcessFeedbackMixin
from .registration import experiment_record, split_overlap
from .reporting import RegistrationToTrackers, SummaryTable

_STATE_FILE = "loo_gspo_state.json"


# Model-input keys TRL forwards to `_get_per_token_logps_and_entropies` (multimodal models).
_FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)

# Per-optimizer-step sums, reduced across processes once per step (index names of `_stats`).
_SUM_STATS = (
    "answers",  # answers with at least one valid token
    "tokens",  # valid completion tokens (the token-total denominator)
    "clip_low_answers",
    "clip_high_answers",
    "clip_low_tokens",
    "clip_high_tokens",
    "guard_answers",
    "ratio_sum",  # Σ s_i over valid answers
    "entropy_sum",  # Σ token entropy over valid tokens
    "kl_sum",  # Σ k3 KL over valid tokens (only when beta != 0)
)
_IDX = {name: i for i, name in enumerate(_SUM_STATS)}


def _default_args(model: Any) -> LooGspoConfig:
    if isinstance(model, str):
        name = model
    else:
        name = getattr(model.config, "_name_or_path", None) or type(model).__name__
    return LooGspoConfig(f"{str(name).rstrip('/').split('/')[-1]}-LooGspo")


class LooGspoTrainer(ProcessFeedbackMixin, DynamicSamplingMixin, GRPOTrainer):
    """Drop-in replacement for ``trl.GRPOTrainer`` implementing LOO-GSPO (``SPEC.md`` §2.2, §3.2, §3.3).

    Same constructor as ``GRPOTrainer``; ``args`` must be a :class:`LooGspoConfig` (or ``None`` for defaults).
    Differences from ``GRPOTrainer``:

    * advantages come from ``args.advantage_estimator`` (leave-one-out by default), computed per prompt group from
      the gathered rewards; unscorable answers (a reward function returned ``None``) get 0 and stay out of the
      baseline;
    * the loss is ``ℓ_i = −min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i)`` with GSPO's geometric-mean ratio
      ``s_i``, aggregated by ``args.loss_aggregation`` over ONE global count of valid completion tokens per optimizer
      step, exact for any ``steps_per_generation`` / ``gradient_accumulation_steps`` and any number of processes;
    * extra metrics (see ``docs/metrics.md``).
    """

    _tag_names = ["trl", "grpo", "trl-loo-gspo", "rlvr"]
    _name = "LOO-GSPO"
    _paper: dict[str, str] = {}  # no single paper: the card lists the four sources (trl_loo_gspo.hub.SOURCES)

    def __init__(self, model: Any, reward_funcs: Any = None, args: LooGspoConfig | None = None, *rest, **kwargs):
        if args is None:
            args = _default_args(model)
        elif not isinstance(args, LooGspoConfig):
            kind = "a trl.GRPOConfig" if isinstance(args, GRPOConfig) else f"a {type(args).__name__}"
            raise TypeError(
                f"LooGspoTrainer needs args=LooGspoConfig(...), got {kind}. LooGspoConfig subclasses GRPOConfig and "
                "takes the same arguments: replace `GRPOConfig(` with `LooGspoConfig(` (from trl_loo_gspo)."
            )
        super().__init__(model, reward_funcs, args, *rest, **kwargs)
        self._check_launch()
        self._check_runtime_support()
        self._check_merge_support()

        # Loss-denominator bookkeeping (see `_begin_optimizer_step`).
        self._slice_counts: torch.Tensor | None = None  # (S, 2): global [tokens, answers] of each buffered slice
        self._micro_in_step = 0
        self._denominator: float = 1.0
        self._needs_rescale = False
        self._stats = torch.zeros(len(_SUM_STATS), dtype=torch.float64, device=self.accelerator.device)
        self._ratio_extrema = torch.tensor([-math.inf, -math.inf], dtype=torch.float64, device=self.accelerator.device)
        self._step_loss_sum: torch.Tensor | None = None
        self._step_update_time = 0.0
        self._generation_time = 0.0  # cumulative seconds spent in generation + scoring
        self._last_rewards_per_func: torch.Tensor | None = None
        self._local_generated_tokens = 0
        # Cumulative counters (saved with checkpoints).
        self.generated_tokens_total = 0
        self.effective_tokens_total = 0
        self._init_sampling()
        self._init_process()
        self._kl_ref_model = self._reference_for_kl_logging()
        # Entropy feedback on ε_high (SPEC §5.1): state k, target H* (possibly calibrated from the first steps).
        self._base_epsilon_high = self.epsilon_high
        self.entropy_state = EntropyControllerState(k=args.entropy_k_init if args.entropy_feedback else 0.0)
        self.entropy_target = args.entropy_target
        self._entropy_calibration: list[float] = []
        if args.entropy_feedback:
            self.epsilon_high = self._base_epsilon_high + self.entropy_state.k
        self.add_callback(RolloutTokenBudget(self))  # reads args.rollout_token_budget
        self.data_source: dict[str, Any] | None = None  # dataset name/revision/split, recorded at registration
        self.experiment_record: dict[str, Any] | None = None
        self._merge_for_push = False
        self.add_callback(RegistrationToTrackers(self))
        if args.summary_table:
            self.add_callback(SummaryTable(self))

    # ------------------------------------------------------------------ setup checks
    def _spans_generation_rounds(self) -> bool:
        """Whether one optimizer step can use micro-batches from more than one generation round."""
        rounds = self.args.steps_per_generation * self.num_iterations
        return rounds % self.args.gradient_accumulation_steps != 0

    def _reference_for_kl_logging(self):
        """A frozen copy of the initial policy for ``reference_kl_logging_steps`` when TRL built no reference (β = 0,
        no PEFT adapter to disable); ``None`` when not needed."""
        if self.args.reference_kl_logging_steps is None or self.beta != 0.0 or is_peft_model(self.model):
            return None
        if self.accelerator.distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP):
            raise ValueError(
                "reference_kl_logging_steps with beta=0 needs a frozen copy of the model, which is not supported "
                "with DeepSpeed or FSDP sharding here: use LoRA (the reference is the disabled adapter) or beta > 0."
            )
        reference = copy.deepcopy(self.accelerator.unwrap_model(self.model)).eval()
        reference.requires_grad_(False)
        return reference

    def _log_reference_kl(self, output: dict) -> None:
        """Every ``reference_kl_logging_steps`` steps with β = 0: the global token-weighted k3 KL to the reference."""
        every = self.args.reference_kl_logging_steps
        if every is None or self.beta != 0.0 or self.state.global_step % every != 0:
            return
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        keep, batch = output["completion_ids"].size(1), self.args.per_device_train_batch_size
        with torch.no_grad():
            logps = output.get("old_per_token_logps")
            if logps is None:
                logps, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, attention, keep, batch)
            if self._kl_ref_model is not None:
                ref, _, _ = self._get_per_token_logps_and_entropies(self._kl_ref_model, ids, attention, keep, batch)
            else:  # PEFT: the base model is the policy with its adapter disabled (TRL's own reference)
                unwrapped = self.accelerator.unwrap_model(self.model)
                with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
                    ref, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, attention, keep, batch)
        mask = self._loss_mask(output).to(logps.dtype)
        totals = torch.stack([(core.k3_kl(logps, ref) * mask).sum(), mask.sum()]).to(torch.float64)
        total, count = self.accelerator.reduce(totals, reduction="sum").tolist()
        self._metrics["train"]["kl"].append(total / max(count, 1.0))

    def _check_merge_support(self) -> None:
        if not self.args.hub_merge_adapter:
            return
        if not is_peft_model(self.accelerator.unwrap_model(self.model)):
            raise ValueError(
                "hub_merge_adapter=True needs a LoRA run (peft_config / --use_peft); this run trains the "
                "full model, which is pushed as it is."
            )
        if self.is_fsdp_enabled or self.accelerator.distributed_type == DistributedType.DEEPSPEED:
            raise ValueError(
                "hub_merge_adapter=True is not supported with FSDP or DeepSpeed (the weights are sharded): push the "
                "adapter, then merge it on one process: `PeftModel.from_pretrained(base, repo).merge_and_unload()`."
            )

    def _check_launch(self) -> None:
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched > 1 and self.accelerator.num_processes == 1:
            raise RuntimeError(
                f"This process was launched as one of WORLD_SIZE={launched} processes, but accelerate set up a "
                "single-process run: every process would train alone on its own copy (no gradient all-reduce, "
                "no global token count). On CPU machines pass use_cpu=True (--use_cpu true) with a multi-process "
                "launcher (e.g. recipes/accelerate/cpu-2proc.yaml); on GPUs check that each process sees a GPU."
            )

    def _check_runtime_support(self) -> None:
        if not self._spans_generation_rounds():
            return
        # When an optimizer step spans generation rounds, the global token count of the step is only known after
        # its last micro-batch: gradients are rescaled in place before clipping (exact, since they are linear).
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

    # ------------------------------------------------------------------ advantages (SPEC §2.2)
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func  # gathered over all processes, NaN = unscorable
        self._collect_signals(len(completions))  # SPEC §6 span signals, when process feedback is on
        return rewards_per_func

    def group_ids(self, num_rows: int, num_generations: int, device: torch.device) -> torch.Tensor:
        """Prompt-group id of each gathered row: the sampler's ids when it assembled the batch (groups may then
        differ in size), else row // K (TRL keeps each prompt's K answers contiguous)."""
        if self._batch_group_ids is not None and self._batch_group_ids.numel() == num_rows:
            return self._batch_group_ids.to(device)
        return torch.arange(num_rows, device=device) // num_generations

    def _advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        estimator = self.args.advantage_estimator
        if estimator == "loo":
            return core.loo_advantages(rewards, group_ids)
        if estimator == "group_mean":
            return core.group_mean_advantages(rewards, group_ids)
        return core.grpo_advantages(rewards, group_ids)

    def _generate_and_score_completions(self, inputs):
        start = time.perf_counter()
        self._last_rewards_per_func = None
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        device = self.accelerator.device

        rewards_per_func = self._last_rewards_per_func
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = self._combined_rewards(rewards_per_func)
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        group_ids = self.group_ids(rewards.numel(), num_generations, device)
        # §2.2 advantages over the gathered rewards and per-row group ids (stop-gradient)
        all_advantages = self._advantages(rewards, group_ids)

        local_rows = output["prompt_ids"].size(0)
        start_row = self.accelerator.process_index * local_rows
        advantages = all_advantages[start_row : start_row + local_rows]
        output["advantages"] = advantages.to(output["advantages"].dtype)
        self._process_token_advantages(output, rewards, group_ids)  # SPEC §6; no-op when α = 0
        logged = self._logs["advantages"]  # a bounded deque: replace the entries TRL just appended
        for _ in range(min(all_advantages.numel(), len(logged))):
            logged.pop()
        logged.extend(all_advantages.tolist())

        # Metrics of this generation round: one all-reduce for the token counts.
        mask = self._loss_mask(output)
        counts = torch.tensor([self._local_generated_tokens, 0.0, 0.0], dtype=torch.float64, device=device)
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
        metrics["rewards/frac_unscorable"].append(unscorable.float().mean().item())
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
        if mode == "train":
            self._log_reference_kl(output)
        elapsed = time.perf_counter() - start
        self._generation_time += elapsed
        metrics["timing/generate_score_s"].append(elapsed)
        return output

    # ------------------------------------------------------------------ loss denominator (SPEC §3.3)
    @staticmethod
    def _loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
        """Valid generated tokens: completion mask times TRL's tool mask (tool outputs are not the policy's)."""
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        return mask

    def _count_index(self) -> int:
        """Column of the per-slice counts ``[tokens, answers]`` that is the loss denominator."""
        return 0 if self.args.loss_aggregation == "token_total" else 1

    def _count_name(self) -> str:
        return "tokens" if self.args.loss_aggregation == "token_total" else "answers"

    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        previous = self._buffered_inputs
        inputs = super()._prepare_inputs(generation_batch)
        if self._buffered_inputs is not previous:  # a new generation round was buffered
            local = torch.stack(
                [
                    torch.stack([m.sum(), (m.sum(-1) > 0).sum()]).to(torch.float64)
                    for m in (self._loss_mask(batch) for batch in self._buffered_inputs)
                ]
            )
            self._slice_counts = self.accelerator.reduce(local, reduction="sum")
        if self._micro_in_step == 0:
            self._begin_optimizer_step()
        return inputs

    def _begin_optimizer_step(self) -> None:
        """Fix the denominator of the optimizer step that starts at micro-step ``self._step``.

        Micro-step ``m`` uses slice ``m % S`` of generation round ``m // (S * num_iterations)``. When all micro-steps
        of this optimizer step use the current round, the global count is known now and is exact. Otherwise a
        provisional denominator is used and the accumulated gradients are rescaled by provisional/true at the end
        of the step (`_finish_optimizer_step`), before gradient clipping; exact because gradients are linear in the
        loss.
        """
        steps = self.args.steps_per_generation
        per_round = steps * self.num_iterations
        first, n = self._step, self.current_gradient_accumulation_steps
        column = self._slice_counts[:, self._count_index()]
        if first // per_round == (first + n - 1) // per_round:
            # §3.3 denominator: global valid tokens of every micro-batch of this optimizer step
            self._denominator = float(sum(column[(first + k) % steps] for k in range(n)))
            self._needs_rescale = False
        else:
            self._denominator = float(column[first % steps]) * n
            self._needs_rescale = True
        self._denominator = max(self._denominator, 1.0)
        self._stats.zero_()
        self._ratio_extrema.fill_(-math.inf)
        self._step_loss_sum = None
        self._step_update_time = 0.0

    def training_step(self, model, inputs, num_items_in_batch):
        generation_before = self._generation_time
        start = time.perf_counter()
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._step_update_time += time.perf_counter() - start - (self._generation_time - generation_before)
        self._micro_in_step += 1
        self._step_loss_sum = loss if self._step_loss_sum is None else self._step_loss_sum + loss
        if self.accelerator.sync_gradients:
            loss = self._finish_optimizer_step(model, loss)
        return loss

    def _finish_optimizer_step(self, model, loss: torch.Tensor) -> torch.Tensor:
        """Close an optimizer step: exact rescale if needed, then log the step's metrics (two all-reduces)."""
        stats = self.accelerator.reduce(self._stats, reduction="sum")
        extrema = self.accelerator.reduce(self._ratio_extrema, reduction="max")
        true_denominator = max(float(stats[_IDX[self._count_name()]]), 1.0)
        # Equal by construction unless the step spanned generation rounds (`_needs_rescale`).
        if true_denominator != self._denominator:
            # §3.3 exact denominator when the step spanned generation rounds: rescale (linear) before clipping
            factor = self._denominator / true_denominator
            for param in model.parameters():
                if param.grad is not None:
                    param.grad.mul_(factor)
            # The Trainer adds each micro-batch's returned loss to its running total: correct the step's sum.
            loss = loss + (factor - 1.0) * self._step_loss_sum
        self._log_loss_stats("train", stats, extrema)
        if self.args.entropy_feedback:
            self._update_entropy_feedback(float(stats[_IDX["entropy_sum"]]) / max(float(stats[_IDX["tokens"]]), 1.0))
        self._metrics["train"]["tokens/loss_denominator"].append(true_denominator)
        self._metrics["train"]["timing/update_s"].append(self._step_update_time)
        self._micro_in_step = 0
        return loss

    def _update_entropy_feedback(self, entropy: float) -> None:
        """After an optimizer step: move k (SPEC §5.1) and set the effective ε_high of the next step."""
        args = self.args
        if self.entropy_target is None:  # calibration: H* = the mean entropy of the first steps
            self._entropy_calibration.append(entropy)
            if len(self._entropy_calibration) >= args.entropy_calibration_steps:
                self.entropy_target = sum(self._entropy_calibration) / len(self._entropy_calibration)
        else:
            self.entropy_state = entropy_controller_step(
                self.entropy_state,
                entropy,
                self.entropy_target,
                args.entropy_step,
                args.entropy_k_max,
                args.entropy_ema,
                args.entropy_dead_band,
            )
        self.epsilon_high = self._base_epsilon_high + self.entropy_state.k
        metrics = self._metrics["train"]
        metrics["entropy_feedback/entropy"].append(entropy)
        metrics["entropy_feedback/k"].append(self.entropy_state.k)
        metrics["entropy_feedback/epsilon_high"].append(self.epsilon_high)
        if self.entropy_target is not None:
            metrics["entropy_feedback/target"].append(self.entropy_target)

    def _log_loss_stats(self, mode: str, stats: torch.Tensor, extrema: torch.Tensor) -> None:
        s = {name: float(stats[i]) for name, i in _IDX.items()}
        answers, tokens = max(s["answers"], 1.0), max(s["tokens"], 1.0)
        metrics = self._metrics[mode]
        metrics["clip_ratio/low_answers"].append(s["clip_low_answers"] / answers)
        metrics["clip_ratio/high_answers"].append(s["clip_high_answers"] / answers)
        metrics["clip_ratio/region_answers"].append((s["clip_low_answers"] + s["clip_high_answers"]) / answers)
        metrics["clip_ratio/low_tokens"].append(s["clip_low_tokens"] / tokens)
        metrics["clip_ratio/high_tokens"].append(s["clip_high_tokens"] / tokens)
        metrics["clip_ratio/region_tokens"].append((s["clip_low_tokens"] + s["clip_high_tokens"]) / tokens)
        metrics["ratio/mean"].append(s["ratio_sum"] / answers)
        if s["answers"] > 0:
            metrics["ratio/max"].append(float(extrema[0]))
            metrics["ratio/min"].append(-float(extrema[1]))
        metrics["entropy"].append(s["entropy_sum"] / tokens)
        if self.beta != 0.0:
            metrics["kl"].append(s["kl_sum"] / tokens)
        if self.args.log_ratio_clamp is not None:
            metrics["guard/trigger_fraction"].append(s["guard_answers"] / answers)

    # ------------------------------------------------------------------ loss (SPEC §3.2, §3.3)
    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        mask = self._loss_mask(inputs)
        per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{key: inputs.get(key) for key in _FORWARD_KEYS},
        )
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

        lengths = mask.sum(-1)
        fmask = mask.to(per_token_logps.dtype)
        extra = None  # per-token process term ℓ_i,t − ℓ_i; 0 wherever Â_i,t = Â_i
        process_advantages = inputs.get("process_advantages")
        # A micro-batch without any process advantage (α = 0, or a constant signal) takes the outcome-only path:
        # the same loss and gradient bit for bit (the per-token route would only reorder float sums).
        if process_advantages is not None and bool(process_advantages.any()):
            token_advantages = advantages.unsqueeze(1) + process_advantages
            # §6 response-level ratio with per-token advantages Â_i,t = Â_i + α Â^proc_i,t
            token_losses = core.token_response_loss(s, token_advantages, self.epsilon_low, self.epsilon_high)
            extra = token_losses - losses.unsqueeze(1)
        per_token_loss = None
        if self.use_vllm and self.vllm_importance_sampling_correction:
            base = losses.unsqueeze(1) if extra is None else losses.unsqueeze(1) + extra
            per_token_loss = base * inputs["importance_sampling_ratio"]
        per_token_kl = None
        if self.beta != 0.0:
            per_token_kl = core.k3_kl(per_token_logps, inputs["ref_per_token_logps"])
            if self.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * s.unsqueeze(1)
            if per_token_loss is None:
                per_token_loss = losses.unsqueeze(1) if extra is None else losses.unsqueeze(1) + extra
            per_token_loss = per_token_loss + self.beta * per_token_kl
        if per_token_loss is not None:  # per-token terms: the masked row mean times T_i is the row's token sum
            row_losses = (per_token_loss * fmask).sum(-1) / lengths.clamp(min=1).to(fmask.dtype)
        elif extra is not None:  # ℓ_i plus the row mean of the process term: exactly ℓ_i when the term is 0
            row_losses = losses + (extra * fmask).sum(-1) / lengths.clamp(min=1).to(fmask.dtype)
        else:
            row_losses = losses

        if mode == "train":
            denominator = self._denominator
        else:
            local = torch.stack([mask.sum(), (lengths > 0).sum()]).to(torch.float64)
            denominator = float(self.accelerator.reduce(local, reduction="sum")[self._count_index()])
        # Every process contributes its share over the global denominator; DDP/FSDP average gradients (and the
        # eval loop averages losses) over processes, hence the factor num_processes.
        scale = self.accelerator.num_processes
        if self.args.loss_aggregation == "token_total":
            # §3.3 this process's share of Σ T_i ℓ_i / (global token count of the optimizer step)
            loss = core.token_total_aggregate(row_losses, lengths, denominator) * scale
        else:
            loss = core.sequence_mean_aggregate(row_losses, lengths, denominator) * scale

        if self.aux_loss_enabled:
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather(aux_loss.detach()).mean().item())

        self._accumulate_stats(mode, s, advantages, lengths, fmask, entropies, per_token_kl, guard)
        return loss

    @torch.no_grad()
    def _accumulate_stats(self, mode, s, advantages, lengths, fmask, entropies, per_token_kl, guard) -> None:
        """Add this micro-batch's sums to the step's statistics (no host sync: masked ops, no boolean indexing)."""
        valid = lengths > 0
        s = s.detach().to(torch.float64)
        low, high = core.clip_masks(s, advantages, self.epsilon_low, self.epsilon_high)
        low, high = low & valid, high & valid
        lengths = lengths.to(torch.float64)
        zero = torch.zeros((), dtype=torch.float64, device=s.device)
        values = [
            valid.sum(),
            lengths.sum(),
            low.sum(),
            high.sum(),
            (lengths * low).sum(),
            (lengths * high).sum(),
            (guard & valid).sum() if guard is not None else zero,
            torch.where(valid, s, zero).sum(),
            (entropies * fmask).sum(),
            (per_token_kl.detach() * fmask).sum() if per_token_kl is not None else zero,
        ]
        stats = torch.stack([v.to(torch.float64) for v in values])
        minus_inf = torch.full_like(s, -math.inf)
        extrema = torch.stack([torch.where(valid, s, minus_inf).amax(), torch.where(valid, -s, minus_inf).amax()])
        if mode == "train":
            self._stats += stats
            self._ratio_extrema = torch.maximum(self._ratio_extrema, extrema)
        else:
            self._log_loss_stats(
                mode,
                self.accelerator.reduce(stats, reduction="sum"),
                self.accelerator.reduce(extrema, reduction="max"),
            )

    # ------------------------------------------------------------------ registration (SPEC §2)
    def train(self, *args, **kwargs):
        if self.args.register_experiment:
            self.register_experiment()
        return super().train(*args, **kwargs)

    def register_experiment(self) -> dict:
        """Refuse overlapping splits, then write ``experiment.json`` (main process) and return the record."""
        validation = self.eval_dataset
        named = validation.items() if isinstance(validation, dict) else [("eval_dataset", validation)]
        for name, split in named:
            if split is None or isinstance(split, IterableDataset) or isinstance(self.train_dataset, IterableDataset):
                continue
            if "prompt" not in split.column_names or "prompt" not in self.train_dataset.column_names:
                continue
            shared = split_overlap(self.train_dataset, split)
            if shared:
                raise ValueError(
                    f"{name} shares {len(shared)} of its {len(split)} prompts with train_dataset (first: "
                    f"{split[shared[0]]['prompt']!r}). The validation set must be independent of training (SPEC "
                    "§5.2): remove those rows, or set register_experiment=False to skip this check."
                )
        record = experiment_record(self, task=self.args.experiment_task)
        if self.data_source is not None:
            record["data"]["source"] = self.data_source
        self.experiment_record = record
        if self.args.should_save:
            os.makedirs(self.args.output_dir, exist_ok=True)
            with open(os.path.join(self.args.output_dir, "experiment.json"), "w") as f:
                json.dump(record, f, indent=2, default=str)
        return record

    def create_model_card(self, *args, **kwargs) -> None:
        """TRL's model card plus the method and its flags, the validation figures, the registration record (SPEC §2)
        and the four sources (:func:`trl_loo_gspo.hub.card_sections`)."""
        super().create_model_card(*args, **kwargs)
        path = os.path.join(self.args.output_dir, "README.md")
        if not self.is_world_process_zero() or not os.path.exists(path):
            return
        history = next(
            (cb.history for cb in self.callback_handler.callbacks if type(cb).__name__ == "ValidationCallback"), []
        )
        with open(path, "a") as f:
            f.write(card_sections(self.args, history, self.experiment_record))

    # ------------------------------------------------------------------ Hub pushes
    def push_to_hub(self, *args, **kwargs):
        """``Trainer.push_to_hub`` (adapter or full model, tokenizer, model card, ``experiment.json``); with
        ``hub_merge_adapter`` the LoRA adapter is merged into the base weights first (the adapter is kept in
        ``adapter/``)."""
        self._merge_for_push = self.args.hub_merge_adapter
        try:
            return super().push_to_hub(*args, **kwargs)
        finally:
            self._merge_for_push = False

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        super().save_model(output_dir, _internal_call)
        if self._merge_for_push and self.args.should_save:
            self._save_merged(output_dir or self.args.output_dir)

    def _save_merged(self, output_dir: str) -> None:
        """Write the merged full model to ``output_dir`` and move the adapter files to ``output_dir/adapter``."""
        model = self.accelerator.unwrap_model(self.model)
        if not is_peft_model(model):
            raise ValueError("hub_merge_adapter=True needs a PEFT (LoRA) model; this run trains the full model.")
        adapter_dir = os.path.join(output_dir, "adapter")
        model.save_pretrained(adapter_dir)
        for name in os.listdir(adapter_dir):
            stale = os.path.join(output_dir, name)
            if os.path.isfile(stale):
                os.remove(stale)
        # A copy, so that the trainer's model keeps its adapter (costs one more copy of the weights while saving).
        merged = copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(output_dir)
        del merged

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            with open(os.path.join(folder, _STATE_FILE), "w") as f:
                json.dump(
                    {
                        "generated_tokens_total": self.generated_tokens_total,
                        "effective_tokens_total": self.effective_tokens_total,
                        "sampling_counters": self.sampling_counters,
                        "refill_sampler": None if self._refill is None else self._refill.state_dict(),
                        "filtered_registry": self.filtered_registry,
                        "entropy_feedback": {
                            "state": self.entropy_state.to_dict(),
                            "target": self.entropy_target,
                            "calibration": self._entropy_calibration,
                        },
                    },
                    f,
                )

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            path = os.path.join(checkpoint, _STATE_FILE)
            if os.path.exists(path):
                with open(path) as f:
                    state = json.load(f)
                self.generated_tokens_total = int(state["generated_tokens_total"])
                self.effective_tokens_total = int(state["effective_tokens_total"])
                self.sampling_counters.update(state.get("sampling_counters", {}))
                feedback = state.get("entropy_feedback")
                if feedback is not None:
                    self.entropy_state = EntropyControllerState.from_dict(feedback["state"])
                    self.entropy_target = feedback["target"]
                    self._entropy_calibration = list(feedback["calibration"])
                    if self.args.entropy_feedback:
                        self.epsilon_high = self._base_epsilon_high + self.entropy_state.k
                registry = state.get("filtered_registry") or {}
                self.filtered_registry = {int(index): record for index, record in registry.items()}
                if self._refill is not None and state.get("refill_sampler") is not None:
                    self._refill.load_state_dict(state["refill_sampler"])
