"""``LooGspoTrainer``: TRL's ``GRPOTrainer`` plus LOO-GSPO's flags (docs/method.md, docs/architecture.md).

The math lives in :mod:`trl_loo_gspo.algorithms` (pure functions over tensors); which code computes the loss and the
advantages is the :class:`~trl_loo_gspo.config.Objective` the config resolves to. This class overrides each TRL hook
once, in the order one step's data flows, and delegates to components it owns (each with ``state_dict`` /
``load_state_dict``, checkpointed together by :class:`RunStateCallback`):

generate (``_generate``, ``_generate_single_turn``: :class:`DynamicSampler`) → rewards (``_calculate_rewards``:
:class:`RewardChecks`, :class:`ProcessFeedback` signals) → advantages and filtering
(``_generate_and_score_completions``: one :class:`RoundData` per round, passed explicitly) → loss (``_prepare_inputs``,
``_compute_loss``: :class:`StepAccounting`, the loss and aggregation registries) → step end (``training_step``:
the exact denominator's correction, :class:`EntropyFeedback`). The private TRL methods this relies on are listed in
``docs/trl-compatibility.md``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from trl import GRPOTrainer

from ..algorithms.noise import round_position
from ..algorithms.step_accounting import StepAccounting
from ..config import LooGspoConfig, Objective
from .boundary import rolled_back, swapped
from .budget import PlanBudget, RolloutTokenBudget
from .checkpoints import resolve_checkpoint
from .checks import (
    NothingTrainedWarning,
    RewardChecks,
    RewardOutputs,
    check_setup,
    checked_construction,
)
from .clip import ClipControl
from .entropy import EntropyFeedback
from .forward import ForwardMixin
from .generation import (
    Generation,
    answer_metrics,
    replay_extra_logs,
    replay_rollout,
    take_extra_logs,
)
from .loss import batch_loss, eval_denominator
from .process import ProcessFeedback
from .publishing import Publisher
from .reference_kl import ReferenceKL
from .reporting import RegistrationToTrackers, RunFacts, SummaryTable
from .rollout import DynamicSampler
from .rows import Replay, RoundData, combined_rewards, loss_mask, round_advantages, with_extra_fields
from .run_plan import RunPlan
from .run_state import (
    RunStateCallback,
    load_round_in_flight,
    save_round_in_flight,
    saved_run_state,
    upgrade_run_state,
)
from .sampling_plan import SamplingCalls
from .step import (
    RatioNoise,
    TokenCounters,
    close_step,
    entropy_sums,
    log_eval_loss_stats,
    log_loss_stats,
    log_round,
    log_totals,
    replace_last,
    rescale_gradients,
    round_tokens,
)
from .validation import ValidationCallback


class LooGspoTrainer(ForwardMixin, GRPOTrainer):
    """Drop-in replacement for ``trl.GRPOTrainer``: every ``GRPOConfig`` option works, and LOO-GSPO is what the flags
    of :class:`LooGspoConfig` add (docs/method.md).

    Same constructor as ``GRPOTrainer``; ``args`` must be a :class:`LooGspoConfig` (or ``None`` for defaults). With
    ``LooGspoConfig``'s defaults:

    * advantages come from the objective's estimator (leave-one-out), computed per prompt group from the gathered
      rewards; unscorable answers (a reward function returned ``None``) get 0 and stay out of the baseline;
    * the loss is ``ℓ_i = −min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i)`` with GSPO's geometric-mean ratio
      ``s_i``, aggregated over ONE global count of valid completion tokens per optimizer step, exact for any
      ``steps_per_generation`` / ``gradient_accumulation_steps`` and any number of ranks.

    With a TRL ``loss_type`` (and TRL's advantages, its default then) TRL's own code computes both, and dynamic
    sampling, verifiers, entropy feedback, the token budget, registration and the card work on top.
    """

    _tag_names = ["trl", "grpo", "trl-loo-gspo", "rlvr"]
    _name = "LOO-GSPO"
    _paper: dict[str, str] = {}  # no single paper: the card lists the four sources (records.card.SOURCES)
    data_source: dict | None = None  # dataset name/revision/split, recorded at registration (set by the CLI)
    _replay: Replay | None = None  # set while TRL passes over a batch dynamic sampling made (this module only)
    _scored: list | None = None  # set while TRL's own pass scores a batch (this module only)
    _round_layout: int | None = None  # answers per prompt of a sampling round's generation call (this module only)
    generation: Generation | None = None  # None only on a trainer built without __init__ (TRL's own tests do)
    run_plan: RunPlan | None = None  # likewise

    def __init__(self, model: Any, reward_funcs: Any = None, args: LooGspoConfig | None = None, *rest, **kwargs):
        # the run plan: every LOO-GSPO setting resolved once, before the model is loaded (the budget again in train())
        args, self.run_plan = checked_construction(model, reward_funcs, args, rest, kwargs)
        with args.resolved_for_trl():  # TRL's constructor checks the objective that trains, not the unset fields
            super().__init__(model, reward_funcs, args, *rest, **kwargs)
        # TRL's __init__ read the user's fields (None = unset): the attributes TRL's hooks read are the plan's
        plan, accelerator = self.run_plan, self.accelerator
        objective, feedback = plan.objective, plan.feedback
        self.loss_type, self.scale_rewards = objective.loss_type, objective.scale_rewards
        self.importance_sampling_level = objective.importance_sampling_level
        check_setup(
            plan, args, accelerator, self.model, self.num_iterations, self.aux_loss_enabled, self.is_fsdp_enabled
        )
        self.checks = RewardChecks(len(self.reward_funcs))
        self.publisher = Publisher(accelerator, self.model, args, self.reward_funcs, self.reward_weights.tolist())
        self.generation = Generation(accelerator)
        calls = SamplingCalls(
            self._generate_and_score,
            lambda: self.run_plan.tokens_left(self.counters.generated),
            self.generation.peek_generated_tokens,
            lambda rewards_per_func: combined_rewards(rewards_per_func, self.reward_weights),
            lambda: self.state.global_step,
        )
        tools = self.environment_factories is not None
        self.sampler = DynamicSampler(plan.sampling, calls, self.train_dataset, accelerator, tools)
        self.process_feedback = ProcessFeedback(
            feedback.process, list(self.reward_funcs), self.processing_class, accelerator
        )
        every, batch = feedback.reference_kl_logging_steps, args.per_device_train_batch_size
        self.reference_kl = ReferenceKL(every, batch, self.beta, self.model, accelerator)
        self.entropy_feedback = EntropyFeedback(feedback.entropy)
        self.clip_control = ClipControl(feedback.clip, objective.epsilon_low, objective.epsilon_high, accelerator)
        self.epsilon_low, self.epsilon_high = self.clip_control.epsilons(self.entropy_feedback)
        self.counters = TokenCounters()
        self._accounting = StepAccounting(args.steps_per_generation, self.num_iterations, accelerator.device)
        self._generation_time = 0.0  # cumulative seconds spent in generation + scoring
        self.ratio_noise = RatioNoise(accelerator)
        record = lambda: self.experiment_record  # noqa: E731
        callbacks = [NothingTrainedWarning(self.nothing_trained), PlanBudget(), RunStateCallback(self.run_state)]
        callbacks.append(RegistrationToTrackers(objective, record, self.callback_handler.callbacks))
        if plan.records.summary_table:
            callbacks.append(SummaryTable(self.run_facts))
        for callback in callbacks:
            self.add_callback(callback)

    # ------------------------------------------------------------------ generation (§3.1)
    def _generate(self, prompts: list):
        if self._replay is not None:  # TRL's pass over a batch dynamic sampling already made
            return self._replayed_generation(prompts, self._replay)
        output = super()._generate(prompts)
        if self.generation is not None:
            self.generation.count(output)
        return output

    def _replayed_generation(self, prompts: list, replay: Replay) -> tuple:
        """TRL's ``_generate`` over the answers already made, for its per-batch generation metrics: the one place a
        TRL attribute is swapped (``rollout_func`` hands the answers back, ``tools`` off so nothing runs again; every
        row, since TRL's gathers need the same row count on every rank). The figures are then redone over the answers
        when the batch has padding rows."""
        seen = self.state.num_input_tokens_seen
        with swapped(self, rollout_func=replay_rollout(replay.generation), tools=None):
            super()._generate(prompts)
        if bool(replay.round.padding.any()):  # the same on every rank
            tokens, figures = self.generation.answer_figures(
                replay, {*self.eos_token_ids, self._tokenizer.pad_token_id}
            )
            self.state.num_input_tokens_seen = seen + tokens
            answer_metrics(self._metrics["train"], self.state.num_input_tokens_seen, figures)
        return replay.generation

    def _generate_and_score(self, rows: list[dict], answers_per_prompt: int) -> tuple:
        """One sampling round's call for this rank's ``rows`` (the sampler's :class:`SamplingCalls`): generated with
        each prompt ``answers_per_prompt`` times in a row, then scored. TRL's per-batch generation metrics and token
        count of the call are rolled back (the trained batch logs its own)."""
        prompts = [row["prompt"] for row in rows]
        # the layout is read by _generate_single_turn and answers_per_prompt
        with swapped(self, _round_layout=answers_per_prompt), rolled_back(self._metrics["train"], self.state):
            generation = self._generate(prompts)
        inputs = with_extra_fields(rows, generation[5])
        rewards_per_func, signals = self._score(inputs, prompts, generation[3], generation[1])
        return generation, rewards_per_func, signals, take_extra_logs(self._pending_extra_logs, len(generation[1]))

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
        if self._round_layout is not None and num_generations == self.num_generations:
            num_generations = self._round_layout  # a sampling round's main call (a tool loop's later calls pass 1)
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs)

    @property
    def answers_per_prompt(self) -> int:
        """Answers per prompt of the generation call in progress, for rollout functions and backends: each prompt
        appears this many times in a row. ``num_generations``, except in a dynamic-sampling round: the probe size,
        or 1 for continuations (one row per answer, prompts with different counts)."""
        return self.num_generations if self._round_layout is None else self._round_layout

    # ------------------------------------------------------------------ rewards (§2.1)
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self._replay is not None:
            return self._replay.round.rewards_per_func
        rewards_per_func, signals = self._score(inputs, prompts, completions, completion_ids_list)
        if self._scored is not None:  # TRL's own pass: the round data is built from these after it returns
            self._scored.append((rewards_per_func, signals))
        return rewards_per_func

    def _score(self, inputs, prompts, completions, completion_ids_list) -> tuple[torch.Tensor, list | None]:
        """TRL's reward call, checked: the gathered rewards (NaN = unscorable) and the §6 span entries of every
        row of all ranks (``None`` when process feedback is off)."""
        outputs = RewardOutputs()  # this call's verifier outputs, checked and named per function
        with swapped(self, reward_funcs=self.checks.checked(self.reward_funcs, outputs)):  # for TRL's loop
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.checks.check_rewards(rewards_per_func, self.reward_func_names)
        return rewards_per_func, self.process_feedback.collect_signals(outputs, len(completions))

    # ------------------------------------------------------------------ advantages and filtering (§2.2, §3.1, §6)
    def _generate_and_score_completions(self, inputs):
        start = time.perf_counter()
        mode = "train" if self.model.training else "eval"
        if mode == "train" and self.run_plan.sampling.dynamic_sampling:
            final_inputs, replay = self.sampler.sample(inputs, self._metrics[mode])  # generated and scored once
            replay_extra_logs(self._pending_extra_logs, replay)
            # TRL's pass replays the rows made; no old/reference pass for padding rows
            with swapped(self, _replay=replay), self._forward_rows(skip=replay.local_padding):
                output = super()._generate_and_score_completions(final_inputs)
            vllm_is = self.use_vllm and self.vllm_importance_sampling_correction
            vllm_mode = self.vllm_importance_sampling_mode if vllm_is else None
            self.generation.mark_padding(output, replay, self._metrics[mode], vllm_mode)
            round_data = replay.round
        else:
            with swapped(self, _scored=[]):  # TRL's pass scores the batch: _calculate_rewards keeps the scores
                output = super()._generate_and_score_completions(inputs)
                rewards_per_func, signals = self._scored[-1]
            k = self.num_generations if mode == "train" else self.num_generations_eval
            round_data = RoundData.plain(rewards_per_func, k, signals)
        rewards = combined_rewards(round_data.rewards_per_func, self.reward_weights)
        group_ids = round_data.group_ids.to(self.accelerator.device)
        if self.objective.uses_own_loss:  # the step that generated the round, read by our loss (0-dim: every slice)
            output["round_step"] = torch.tensor(self.state.global_step)
        rank, gather = self.accelerator.process_index, self.accelerator.gather
        all_advantages = round_advantages(self.objective, output, rewards, group_ids, rank, gather)
        if not self.objective.trl_advantages:  # ours replace the entries TRL just appended to its logs
            replace_last(self._logs["advantages"], all_advantages.tolist())
        metrics = self._metrics[mode]
        self.process_feedback.token_advantages(output, rewards, round_data, metrics, mode == "train")  # §6
        tokens = round_tokens(output, self.generation.take_generated_tokens(), self.accelerator.reduce)
        sampling, training = self.run_plan.sampling, mode == "train"
        variable = sampling.adaptive_group_size and training
        log_round(metrics, round_data, rewards, all_advantages, tokens, sampling.signal_tolerance, variable)
        if training:
            self.counters.add_round(tokens)
            log_totals(metrics, self.counters)
            forward = self._get_per_token_logps_and_entropies
            self.reference_kl.log(metrics, output, self.state.global_step, self.model, forward)
        elapsed = time.perf_counter() - start
        self._generation_time += elapsed
        metrics["timing/generate_score_s"].append(elapsed)
        return output

    # ------------------------------------------------------------------ optimizer steps (§3.3)
    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        previous = self._buffered_inputs
        inputs = super()._prepare_inputs(generation_batch)
        column = self.objective.count_column
        if column is not None and self._buffered_inputs is not previous:  # a new generation round was buffered
            self._count_round()
        if self._accounting.micro == 0:
            self._accounting.begin(self._step, self.current_gradient_accumulation_steps, column)
        return inputs

    def _count_round(self) -> None:
        """The global ``[tokens, answers]`` of each slice of the buffered round (one all-reduce)."""
        masks = [loss_mask(batch) for batch in self._buffered_inputs]
        local = torch.stack([torch.stack([m.sum(), (m.sum(-1) > 0).sum()]).to(torch.float64) for m in masks])
        self._accounting.slice_counts = self.accelerator.reduce(local, reduction="sum")

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
        step, metrics = self._accounting, self._metrics["train"]
        closed = close_step(step, self.accelerator.reduce, self.objective.count_column)
        stats = closed.stats
        if closed.factor != 1.0:  # only when the step spanned generation rounds
            # §3.3 exact denominator: rescale the gradients (linear) before clipping
            rescale_gradients(model, closed.factor)
            # The Trainer adds each micro-batch's returned loss to its running total: correct the step's sum.
            loss = loss + (closed.factor - 1.0) * step.loss_sum
        if closed.denominator is not None:
            guard = self.objective.log_ratio_clamp is not None
            log_loss_stats(metrics, stats, closed.extrema, self.beta != 0.0, guard)
            metrics["tokens/loss_denominator"].append(closed.denominator)
            # where the clip bites, and with clip_target_fraction the controller's move (rows of every process)
            self.clip_control.close_step(metrics, step.clip_rows, self.state.global_step + 1)
        epsilons = (self.epsilon_low, self.epsilon_high)
        self.ratio_noise.close_step(metrics, step, stats, epsilons, self.state.global_step)  # on a fresh round
        self.entropy_feedback.close_step(metrics, stats)  # §5.1: the next step's ε_high (when on)
        # §5.1 the next step's range: the configured or controlled one, ε_high widened by entropy feedback's k
        self.epsilon_low, self.epsilon_high = self.clip_control.epsilons(self.entropy_feedback, metrics)
        metrics["timing/update_s"].append(step.update_time)
        step.end()
        return loss

    # ------------------------------------------------------------------ loss (§3.2, §3.3)
    def _compute_loss(self, model, inputs):
        with self._forward_rows(skip=inputs.get("padding_rows")):  # padding rows get no forward pass
            return self._own_loss(model, inputs) if self.objective.uses_own_loss else self._trl_loss(model, inputs)

    def _own_loss(self, model, inputs):
        """Our loss: :func:`batch_loss` of the micro-batch (config → objective → :class:`LossStep` → :func:`own_loss`);
        the step's accounting records it."""
        training = self.model.training
        per_token_logps, entropies, aux_loss = self._policy_logps(model, inputs)
        # steps since the micro-batch's round was generated (0: fresh, the old pass's weights); 0 in evaluation
        position = round_position(int(inputs.get("round_step", -1)), self.state.global_step) if training else 0
        fresh = training and position == 0
        if training:  # the step's global denominator
            denominator = self._accounting.denominator
        else:  # an evaluation batch's own count, reduced over processes now
            denominator = eval_denominator(loss_mask(inputs), self.accelerator.reduce, self.objective.count_column)
        out = batch_loss(
            self.objective,
            inputs,
            per_token_logps,
            entropies,
            vllm_weights=self.use_vllm and self.vllm_importance_sampling_correction,
            epsilon_low=self.epsilon_low,  # the step's range (entropy feedback, the clip controller)
            epsilon_high=self.epsilon_high,
            beta=self.beta,
            bias_correction_kl=self.args.use_bias_correction_kl,
            denominator=denominator,
            world_size=self.accelerator.num_processes,
            measure_noise=fresh and inputs.get("old_per_token_logps") is not None,
            round_position=position,
        )
        loss = out.loss
        if self.aux_loss_enabled:
            normalizer = self.current_gradient_accumulation_steps if training else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer
            self._metrics["train" if training else "eval"]["aux_loss"].append(
                self.accelerator.gather(aux_loss.detach()).mean().item()
            )
        if training:
            self._accounting.add(out.stats, out.extrema, out.clip_rows)
            if fresh:  # same weights as the old-log-prob pass (none without that pass: noise 0 by construction)
                self._accounting.add_noise(out.noise)
        else:
            kl, guard = self.beta != 0.0, self.objective.log_ratio_clamp is not None
            log_eval_loss_stats(self._metrics["eval"], out.stats, out.extrema, self.accelerator, kl, guard)
        return loss

    @property
    def objective(self) -> Objective:
        """The objective the config resolves to, resolved once with the run plan (at construction and when training
        starts, :class:`RunPlan`; never per step): what the loss (:func:`batch_loss`), the card and the registration
        record read. (A trainer built without ``__init__``, as TRL's own tests do, resolves ``self.args``.)"""
        plan = getattr(self, "run_plan", None)
        return plan.objective if plan is not None and plan.objective is not None else self.args.objective

    def _trl_loss(self, model, inputs):
        """TRL computes the loss (``super()._compute_loss``); with entropy feedback, the step's token entropy sums
        are kept from the entropies TRL computes anyway."""
        captured = [] if self.model.training and self.entropy_feedback.on else None
        with self._forward_rows(skip=inputs.get("padding_rows"), entropies=captured):
            loss = super()._compute_loss(model, inputs)
        if captured:
            self._accounting.add(entropy_sums(loss_mask(inputs), captured[-1]))
        return loss

    # ------------------------------------------------------------------ run state (checkpoints)
    def components(self) -> dict[str, Any]:
        """Every part with state a resumed run needs, by name (each has ``state_dict`` / ``load_state_dict``)."""
        parts = {
            "counters": self.counters,
            "sampler": self.sampler,
            "entropy_feedback": self.entropy_feedback,
            "clip_range": self.clip_control,
            "reference_kl": self.reference_kl,
            "process_feedback": self.process_feedback,
        }
        validation = [cb for cb in self.callback_handler.callbacks if isinstance(cb, ValidationCallback)]
        parts.update({f"validation_{i}": callback for i, callback in enumerate(validation)})
        return parts

    def run_state(self) -> dict[str, Any]:
        """The extra state a resumed run needs (saved by :class:`RunStateCallback` in ``trainer_state.json``)."""
        return {name: part.state_dict() for name, part in self.components().items()}

    def load_run_state(self, state: dict[str, Any]) -> None:
        state = upgrade_run_state(state)
        for name, part in self.components().items():
            if state.get(name) is not None:
                part.load_state_dict(state[name])
        self.epsilon_low, self.epsilon_high = self.clip_control.epsilons(self.entropy_feedback)

    def _load_optimizer_and_scheduler(self, checkpoint):
        # Runs after Trainer loaded trainer_state.json (and, if asked, rebuilt the callbacks from it).
        super()._load_optimizer_and_scheduler(checkpoint)
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, RunStateCallback):  # rebuilt from the checkpoint without its reader
                callback.reader = self.run_state
        if checkpoint is not None:
            saved = saved_run_state(self.state.stateful_callbacks, checkpoint)
            if saved is not None:
                self.load_run_state(saved)
            in_flight = load_round_in_flight(checkpoint, self.accelerator.process_index, self.accelerator.device)
            if in_flight is not None:  # the checkpoint fell inside a round: continue it, not a regenerated one
                self._step, self._buffered_inputs = in_flight
                if self.objective.count_column is not None:
                    self._count_round()

    def _save_optimizer_and_scheduler(self, output_dir):
        super()._save_optimizer_and_scheduler(output_dir)  # every process, before the checkpoint is pushed or rotated
        per_round = self.args.steps_per_generation * self.num_iterations
        save_round_in_flight(output_dir, self.accelerator.process_index, self._step, self._buffered_inputs, per_round)

    # ------------------------------------------------------------------ registration, card, Hub (method §2)
    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        # the one run plan every hook reads, its budget folded again with every RolloutTokenBudget callback
        callbacks = self.callback_handler.callbacks
        self.run_plan = self.run_plan.with_callbacks(callbacks)
        for callback in callbacks:
            if isinstance(callback, RolloutTokenBudget):
                callback.bind(lambda: self.run_plan, lambda: self.counters.generated)
        if self.run_plan.records.register_experiment:
            self.register_experiment()
        return super().train(resolve_checkpoint(resume_from_checkpoint, self.args.output_dir), *args, **kwargs)

    def register_experiment(self) -> dict | None:
        """Refuse overlapping splits, then write ``experiment.json`` and return the record (:class:`Publisher`)."""
        return self.publisher.register_experiment(
            self.run_plan, self.train_dataset, self.eval_dataset, self.data_source
        )

    def create_model_card(self, *args, **kwargs) -> None:
        super().create_model_card(*args, **kwargs)
        validation = [cb for cb in self.callback_handler.callbacks if isinstance(cb, ValidationCallback)]
        self.publisher.append_card_sections(self.run_plan, self.beta, validation[0].history if validation else [])

    def push_to_hub(self, *args, **kwargs):
        """``Trainer.push_to_hub``; with ``hub_merge_adapter`` the LoRA adapter is merged into the base weights first
        (the adapter is kept in ``adapter/``) and adapter files left at the repository root are deleted, so a merged
        push always waits for its upload."""
        merge = self.run_plan.records.hub_merge_adapter
        with swapped(self.publisher, merge_for_push=merge):
            result = super().push_to_hub(*args, **kwargs)
        if merge and self.is_world_process_zero():
            if hasattr(result, "result"):  # blocking=False: a future of the upload
                result = result.result()
            self.publisher.delete_root_adapter(self.hub_model_id)
        return result

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        super().save_model(output_dir, _internal_call)
        if self.publisher.merge_for_push and self.args.should_save:
            self.publisher.save_merged(output_dir or self.args.output_dir)

    # ------------------------------------------------------------------ read-only views of the components
    @property
    def experiment_record(self) -> dict | None:
        return self.publisher.experiment_record

    @property
    def generated_tokens_total(self) -> int:
        return self.counters.generated

    @property
    def effective_tokens_total(self) -> int:
        return self.counters.effective

    @property
    def sampling_counters(self) -> dict[str, int]:
        return self.sampler.sampling_counters

    @property
    def filtered_registry(self) -> dict[int, dict]:
        return self.sampler.filtered_registry

    def nothing_trained(self) -> str | None:
        """Why this run moved the policy on no answer, or ``None`` when some answer carried a weight."""
        padded, state = self.sampler.sampling_counters["padded_rows"], self.state
        facts = (state.global_step, state.log_history, self.counters.effective, padded)
        return self.checks.nothing_trained(self.run_plan.sampling, self.reward_func_names, *facts)

    def run_facts(self) -> RunFacts:
        """What the end-of-run summary reads besides the log history (:func:`summary_rows`)."""
        clip = self.clip_control.summary() if self.clip_control.tally else None
        counters = self.counters
        return RunFacts(self.state.global_step, counters.generated, counters.effective, clip, self.nothing_trained())
