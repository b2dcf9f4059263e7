"""Dynamic sampling (method §3.1) wired into TRL's generation: a component of ``LooGspoTrainer``.

One training batch is assembled in generation *rounds*. Each round generates and verifies whole prompt groups
(the trainer's ``generate_and_score``: TRL's ``_generate`` and its reward call, as they are), gathers the answers
of every rank, and decides on the gathered rewards — identically on every rank — which groups carry a comparison signal
(:mod:`trl_loo_gspo.algorithms.group_filter`). Missing groups are refilled with new prompts from a sampler that
has its own seed and cursor, up to ``max_sampling_rounds``. The chosen groups are then handed to TRL's
``_generate_and_score_completions`` through a *replay*: ``_generate`` and ``_calculate_rewards`` return the answers
and rewards already made, so no answer is generated or verified twice, and TRL does the padding, old/reference
log-probabilities, importance weights and logging of the final batch only.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any

import torch
from accelerate.utils import gather_object
from datasets import IterableDataset

from ..algorithms.group_filter import RecheckSchedule, RefillSampler, group_decisions, select_groups
from ..algorithms.sampling_rounds import (
    BUDGET_SPENT,
    ROUND_CAP,
    RoundRules,
    RoundState,
    Stop,
    next_round,
    probe_layout,
)
from .rows import (
    NO_SPANS,
    Replay,
    RoundData,
    generation_from_records,
    padding_record,
    prompt_key,
    row_records,
    row_tokens,
)
from .sampling_plan import SamplingCalls, SamplingPlan


class DynamicSampler:
    """With ``dynamic_sampling``, assembles each training batch in rounds (:meth:`sample`, see the module
    docstring). It holds no trainer: a frozen :class:`SamplingPlan` and the :class:`SamplingCalls` the trainer
    provides (generation and scoring of a round's rows, the run plan's budget, the step counter). The trainer's
    ``_generate_and_score_completions`` calls :meth:`sample`, then TRL replays the batch. Its state (counters,
    refill sampler, registry, re-check schedule) is checkpointed through :meth:`state_dict`."""

    def __init__(
        self, plan: SamplingPlan, calls: SamplingCalls, train_dataset: Any, accelerator: Any, environments: bool
    ) -> None:
        self.plan = plan
        self.calls = calls
        self.accelerator = accelerator
        self.num_generations = plan.num_generations
        self.train_dataset = train_dataset
        self._row_store: dict[tuple[int, int], dict] = {}  # this rank's generated rows still in the running
        self._row_calls = 0  # generation calls so far (part of a row's local key)
        self._pad_template: dict | None = None
        self._pad_input: dict | None = None
        self._pad_rewards: torch.Tensor | None = None  # an empty rewards tensor of the right width (padding rows)
        self._warned_exhausted = False
        self._refill: RefillSampler | None = None
        self.sampling_counters = {"discarded_tokens": 0, "padded_rows": 0, "surplus_groups": 0, "rounds": 0}
        self.filtered_registry: dict[int, dict] = {}  # method §3.1 re-checks: dataset index -> record
        self._recheck = RecheckSchedule(None)
        self._prompt_index: dict[str, int] = {}
        if not plan.dynamic_sampling:
            return
        if isinstance(train_dataset, IterableDataset):
            raise ValueError(
                "dynamic_sampling needs a map-style train_dataset (refill prompts are drawn by index); got an "
                "IterableDataset. Materialise it (e.g. Dataset.from_list) or set dynamic_sampling=False."
            )
        if environments:
            raise ValueError("dynamic_sampling does not support environment_factory yet; set dynamic_sampling=False.")
        self._refill = RefillSampler(len(train_dataset), plan.refill_seed, shuffle=plan.shuffle_dataset)
        self._recheck = RecheckSchedule(plan.recheck_filtered_every)
        if plan.recheck_filtered_every is not None:
            for index, prompt in enumerate(train_dataset["prompt"]):
                self._prompt_index.setdefault(prompt_key(prompt), index)

    def state_dict(self) -> dict[str, Any]:
        return {
            "sampling_counters": dict(self.sampling_counters),
            "refill_sampler": None if self._refill is None else self._refill.state_dict(),
            "filtered_registry": {str(index): record for index, record in self.filtered_registry.items()},
            "recheck_schedule": self._recheck.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampling_counters.update(state.get("sampling_counters", {}))
        registry = state.get("filtered_registry") or {}
        self.filtered_registry = {int(index): record for index, record in registry.items()}
        if self._refill is not None and state.get("refill_sampler") is not None:
            self._refill.load_state_dict(state["refill_sampler"])
        self._recheck.load_state_dict(state.get("recheck_schedule"))

    def _combined_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        return self.calls.combine_rewards(rewards_per_func)

    def _generate_rows(self, rows: list[dict], per_prompt: int) -> tuple[list[dict], torch.Tensor]:
        """Generate and verify one answer per row of a *global* row list; each rank takes its equal share.

        ``rows`` holds each prompt ``per_prompt`` times in a row (``per_prompt=1``: one answer per row), and the
        backend's main generation call is told so (``_generate_single_turn``'s ``num_generations``; vLLM server
        mode deduplicates ``prompts[::num_generations]``); rollout functions read ``answers_per_prompt``.
        ``self.num_generations`` is never changed. Returns one reference per global row (owner rank,
        local key, token count) and the gathered rewards; the row data stays in the owner's ``_row_store``.
        """
        ranks, rank = self.accelerator.num_processes, self.accelerator.process_index
        share = len(rows) // ranks
        mine = rows[rank * share : (rank + 1) * share]
        generation, rewards_per_func, signals, extra_logs = self.calls.generate_and_score(mine, per_prompt)
        local = row_records(generation)
        for record, logged in zip(local, extra_logs, strict=True):
            record["extra_log"] = logged  # `log_extra` columns travel with their row
        # Decisions need the gathered rewards only (TRL gathered them). The rows stay on the rank that generated them
        # until the batch is assembled; token counts are known for own rows and summed across ranks once per batch.
        me = self.accelerator.process_index
        call = self._row_calls
        self._row_calls += 1
        for i, record in enumerate(local):
            self._row_store[(call, i)] = record
        if local and self._pad_template is None:
            self._pad_template = padding_record(local[0])  # every padding row of this rank
            self._pad_input = mine[0]  # ... and its inputs: the same prompt
            self._pad_rewards = rewards_per_func[:0]  # ... and the rewards' width, dtype and device (no row)
        refs = [
            {
                "owner": row // share,
                "key": (call, row % share),
                "tokens": row_tokens(local[row % share]) if row // share == me else 0,  # own rows only
                "span_signals": signals[row] if signals is not None else None,
            }
            for row in range(len(rows))
        ]
        return refs, rewards_per_func

    def _release(self, refs: list[dict]) -> None:
        """Forget the data of rows that will not be trained (this rank's share): nothing but chosen rows is kept."""
        me = self.accelerator.process_index
        for ref in refs:
            if ref["owner"] == me:
                self._row_store.pop(ref["key"], None)

    def _aligned(self, rows: list[dict]) -> tuple[list[dict], int]:
        """Pad a global row list with copies of its last row so that it splits evenly over the ranks."""
        extra = -len(rows) % self.accelerator.num_processes
        return rows + [rows[-1]] * extra, extra

    def _decide(self, rewards_per_func: torch.Tensor, sizes: list[int], mode: str, band) -> object:
        rewards = self._combined_rewards(rewards_per_func).cpu()
        ids = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.long))
        return group_decisions(rewards, ids, mode, self.plan.signal_tolerance, tuple(band))

    @staticmethod
    def _candidate(records, prompt, rewards, decision, g) -> dict:
        return {
            "records": records,
            "inputs": [prompt] * len(records),
            "rewards": rewards,
            "keep": bool(decision.keep[g]),
            "mean": float(decision.mean[g]),
            "all_correct": bool(decision.all_correct[g]),
            "all_wrong": bool(decision.all_wrong[g]),
        }

    def _full_round(self, prompts: list[dict]) -> tuple[list[dict], dict]:
        """DAPO's flow: K answers for every prompt, then the filter on the whole group."""
        k = self.num_generations
        rows, _ = self._aligned([p for p in prompts for _ in range(k)])
        records, rewards_per_func = self._generate_rows(rows, k)
        n = len(prompts) * k
        decision = self._decide(
            rewards_per_func[:n], [k] * len(prompts), self.plan.group_filter, self.plan.pass_rate_band
        )
        groups = [
            self._candidate(records[g * k : (g + 1) * k], prompt, rewards_per_func[g * k : (g + 1) * k], decision, g)
            for g, prompt in enumerate(prompts)
        ]
        self._release(records[n:])
        return groups, {
            "discarded": sum(row_tokens(r) for r in records[n:]),
            "probe": 0,
            "continuation": 0,
            "surplus": 0,
        }

    def _probe_round(
        self, prompts: list[dict], pending: list[dict], rows_missing: int, final: bool, probe_rates: list[float]
    ) -> tuple[list[dict], dict, list[dict]]:
        """Two-stage sampling (method §3.1 variant) in ONE generation call per round: the call carries the
        continuations of the previous round's passing probes (one row per answer) and ``probe_generations`` answers
        for each new prompt. Only prompts whose probe pass rate lies strictly inside ``probe_pass_rate_band`` get
        the rest of their group — in the next round's call — and the probe answers stay members of it. Only as many
        prompts are continued as the batch still has rows for; the others' probes are discarded (surplus). With
        ``adaptive_group_size`` the group sizes vary per prompt. On the ``final`` round no continuation can follow,
        so only groups of exactly the probe size are taken. Those decisions are the pure
        :func:`~trl_loo_gspo.algorithms.sampling_rounds.probe_layout`; this method generates and assembles. Returns
        the decided groups, token stats and the new pending groups."""
        plan = self.plan
        probe = plan.probe_generations
        continuation = [p["prompt"] for p in pending for _ in range(p["size"] - probe)]
        rows, _ = self._aligned(continuation + [x for x in prompts for _ in range(probe)])
        records, rewards_per_func = self._generate_rows(rows, 1 if continuation else probe)
        c, n = len(continuation), len(continuation) + len(prompts) * probe
        stats = {
            "discarded": sum(row_tokens(r) for r in records[n:]),
            "probe": sum(row_tokens(r) for r in records[c:n]),
            "continuation": sum(row_tokens(r) for r in records[:c]),
            "surplus": 0,
        }
        self._release(records[n:])
        groups: list[dict] = []
        if pending:  # the previous round's passing probes, completed by this call
            start, full_records, full_rewards = 0, [], []
            for group in pending:
                rest = group["size"] - probe
                full_records.append(group["records"] + records[start : start + rest])
                full_rewards.append(torch.cat([group["rewards"], rewards_per_func[start : start + rest]]))
                start += rest
            full = self._decide(
                torch.cat(full_rewards), [g["size"] for g in pending], plan.group_filter, plan.pass_rate_band
            )
            for g, group in enumerate(pending):
                groups.append(self._candidate(full_records[g], group["prompt"], full_rewards[g], full, g))
                if full.keep[g]:
                    rows_missing -= group["size"]
        if not prompts:
            return groups, stats, []
        probe_rewards = rewards_per_func[c:n]
        decision = self._decide(probe_rewards, [probe] * len(prompts), "pass_rate_band", plan.probe_pass_rate_band)
        probe_rates.extend(decision.mean.tolist())
        layout = probe_layout(  # which probes pass, their group sizes, surplus, complete, continued: all decided there
            decision.mean.tolist(),
            decision.keep.tolist(),
            rows_missing,
            probe,
            self.num_generations,
            plan.adaptive_group_size,
            plan.group_size_bounds,
            final,
        )

        def rows_of(j: int) -> slice:
            return slice(c + j * probe, c + (j + 1) * probe)

        def rewards_of(j: int) -> torch.Tensor:
            return probe_rewards[j * probe : (j + 1) * probe]

        for j in layout.filtered:  # the probe filtered it: decided as a group of the probe's answers
            groups.append(self._candidate(records[rows_of(j)], prompts[j], rewards_of(j), decision, j))
        stats["discarded"] += sum(row_tokens(r) for j in layout.surplus for r in records[rows_of(j)])
        self._release([r for j in layout.surplus for r in records[rows_of(j)]])
        stats["surplus"] = len(layout.surplus)
        if layout.complete:  # a group of exactly the probe is done: the group filter decides it now
            whole = self._decide(
                torch.cat([rewards_of(j) for j in layout.complete]),
                [probe] * len(layout.complete),
                plan.group_filter,
                plan.pass_rate_band,
            )
            for g, j in enumerate(layout.complete):
                groups.append(self._candidate(records[rows_of(j)], prompts[j], rewards_of(j), whole, g))
        new_pending = [
            {"prompt": prompts[j], "records": records[rows_of(j)], "rewards": rewards_of(j), "size": layout.size_of[j]}
            for j in layout.continued
        ]
        return groups, stats, new_pending

    def _budget_spent(self) -> bool:
        """Whether the run plan's rollout-token budget (``budget_left``: the trainer's :class:`RunPlan`, however the
        budget was given) is reached counting this call's rounds so far (one sum over ranks; none without a budget):
        then nothing new is drawn — no further round, or with the probe only the continuations of probes that already
        passed —, so a run with dynamic sampling passes the budget by at most one round, as a run without it does."""
        left = self.calls.budget_left()
        if left is None:
            return False
        local = torch.tensor([float(self.calls.generated_this_call())], dtype=torch.float64)
        this_call = self.accelerator.reduce(local.to(self.accelerator.device), reduction="sum").item()
        return int(this_call) >= left

    def sample(self, inputs: list[dict], metrics: dict[str, list]) -> tuple[list[dict], Replay]:
        """The training batch of one generation call: this rank's inputs (one per row, TRL's layout) and the
        :class:`Replay` TRL's pass runs on; the rounds' metrics go to ``metrics`` (the trainer's training metrics)."""
        plan = self.plan
        k = self.num_generations
        ranks, rank = self.accelerator.num_processes, self.accelerator.process_index
        local_rows = len(inputs)
        total_rows = local_rows * ranks  # one generation batch
        needed = total_rows // k  # groups of K in one generation batch
        smallest = plan.group_size_bounds[0]
        if plan.probe_generations and plan.adaptive_group_size and smallest > total_rows:  # known only here
            raise ValueError(
                f"adaptive_group_size: min_generations={smallest} is larger than the generation batch, {total_rows} "
                f"rows ({local_rows} per process x {ranks} process(es): per_device_train_batch_size x "
                "steps_per_generation x processes). No group of min_generations answers fits in it: every probe that "
                f"passed would be discarded and the batch padded. Set min_generations <= {total_rows}, or raise "
                "per_device_train_batch_size or steps_per_generation."
            )
        # TRL's batch holds each prompt k times in a row: gather each group's first row only
        first_rows = [x for i, x in enumerate(inputs) if (rank * local_rows + i) % k == 0]
        prompts = [x for part in gather_object([first_rows]) for x in part]
        readmitted = self._readmit(needed)
        prompts = prompts + [self.train_dataset[i] for i in readmitted]
        seen = {prompt_key(p["prompt"]) for p in prompts}  # refill never draws a prompt of the batch being filled
        candidates: list[dict] = []
        totals = {"discarded": 0, "probe": 0, "continuation": 0, "surplus": 0}
        probe_rates: list[float] = []  # every probe's pass rate of this call (the probe/* histogram)
        rules = RoundRules(
            total_rows=total_rows,
            num_generations=k,
            max_rounds=plan.max_sampling_rounds,
            probe=plan.probe_generations,
            adaptive=plan.adaptive_group_size,
            min_group=plan.group_size_bounds[0],
            ranks=ranks,
        )
        rounds, filled = 0, 0
        pending: list[dict] = []  # probe mode: passing probes whose continuation comes with the next call
        while True:
            rounds += 1
            if plan.probe_generations:
                final = rounds >= plan.max_sampling_rounds
                groups, stats, pending = self._probe_round(prompts, pending, total_rows - filled, final, probe_rates)
            else:
                groups, stats = self._full_round(prompts)
            for key, value in stats.items():
                totals[key] += value
            for group in groups:
                if not group["keep"]:
                    self._release(group["records"])
            candidates.extend(groups)
            filled = min(sum(len(c["records"]) for c in candidates if c["keep"]), total_rows)
            full = filled >= total_rows and not pending
            state = RoundState(
                rounds=rounds,
                filled=filled,
                pending_groups=len(pending),
                pending_rows=sum(group["size"] for group in pending),  # rows the next call completes
                kept=sum(c["keep"] for c in candidates) + len(pending),  # pending groups passed their probe
                decided=len(candidates) + len(pending),
                spent=not full and self._budget_spent(),  # (a collective: every rank reaches it on the same rounds)
            )
            action = next_round(rules, state)  # §3.1 the round decisions, on values every rank shares
            if isinstance(action, Stop):
                break
            prompts = self._draw_refill(action.draw, seen) if action.draw else []  # the same on every rank
            seen.update(prompt_key(p["prompt"]) for p in prompts)

        reason = action.reason  # None: the batch is full
        why = f"max_sampling_rounds={plan.max_sampling_rounds}" if reason == ROUND_CAP else reason
        spent, exhausted = reason == BUDGET_SPENT, reason is not None
        selection = select_groups(
            [c["keep"] for c in candidates], [len(c["records"]) for c in candidates], total_rows, exhausted=exhausted
        )
        if exhausted and selection.padding_rows and plan.on_sampling_exhausted == "error" and not spent:
            raise RuntimeError(
                f"dynamic sampling filled {total_rows - selection.padding_rows} of {total_rows} rows with groups "
                f"carrying a comparison signal after {rounds} generation rounds ({why}). Raise max_sampling_rounds, "
                "or set on_sampling_exhausted='pad' to train on the groups found."
            )
        if selection.padding_rows and not self._warned_exhausted and not spent:
            warnings.warn(
                f"dynamic sampling stopped ({why}) with "
                f"{total_rows - selection.padding_rows}/{total_rows} rows in groups carrying a comparison signal; "
                "the rest of the batch is zero-weight padding (logged as sampling/padded_fraction). Warning once.",
                stacklevel=2,
            )
            self._warned_exhausted = True
        totals["probe_rates"] = probe_rates
        self._log_sampling(metrics, candidates, selection, rounds, total_rows, totals)
        self._update_registry(metrics, candidates, selection, readmitted)

        chosen = [candidates[i] for i in selection.chosen]
        chosen_set = set(selection.chosen)
        for i, candidate in enumerate(candidates):  # kept groups beyond the batch (surplus)
            if candidate["keep"] and i not in chosen_set:
                self._release(candidate["records"])
        # Groups mostly generated on rank r first, so that most rows are trained where they were made and only the
        # others move (once, to the rank that trains them). A stable sort: the same order on every rank.
        chosen.sort(key=lambda c: Counter(r["owner"] for r in c["records"]).most_common(1)[0][0])
        # Padding rows: zero-weight one-token rows (their completion mask is zeroed after TRL's pass, rewards NaN).
        # (no candidate at all, e.g. a last round whose passing probes all wanted larger groups: the batch's own)
        inputs_pool = [x for c in candidates for x in c["inputs"]] or list(inputs)
        all_refs = [r for c in chosen for r in c["records"]] + [{"pad": True}] * selection.padding_rows
        all_inputs = [x for c in chosen for x in c["inputs"]] + [
            inputs_pool[i % len(inputs_pool)] for i in range(selection.padding_rows)
        ]
        rewards_rows = [c["rewards"] for c in chosen]
        if selection.padding_rows:
            template = self._pad_rewards
            rewards_rows.append(template.new_full((selection.padding_rows, template.size(1)), float("nan")))
        rewards_per_func = torch.cat(rewards_rows)
        pad_rows_all = torch.zeros(len(all_refs), dtype=torch.bool, device=rewards_per_func.device)
        pad_rows_all[len(all_refs) - selection.padding_rows :] = True
        sizes = [len(c["records"]) for c in chosen] + ([selection.padding_rows] if selection.padding_rows else [])
        group_ids = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)).to(pad_rows_all.device)
        signals = None
        if self.plan.process_spans:  # §6: every row has an entry, padding rows explicitly none
            signals = [NO_SPANS if r.get("pad") else r["span_signals"] for r in all_refs]
        mine = slice(rank * local_rows, (rank + 1) * local_rows)
        my_records = self._assemble(all_refs, local_rows)
        my_inputs = [
            self._pad_input if pad else row
            for row, pad in zip(all_inputs[mine], pad_rows_all[mine].tolist(), strict=True)
        ]  # a padding row's inputs are the prompt its prompt_ids come from
        replay = Replay(
            generation_from_records(my_records),
            RoundData(rewards_per_func, group_ids, pad_rows_all, signals),
            pad_rows_all[mine],
            [r.get("extra_log", {}) for r in my_records],
        )
        return my_inputs, replay

    def _draw_refill(self, count: int, seen: set[str]) -> list[dict]:
        """``count`` refill prompts: the refill sampler's next indices, skipping the filtered registry's and any prompt
        already in this batch's rounds (``seen``, content keys: the batch TRL handed in and earlier refills); only a
        dataset too small to avoid them repeats one."""
        prompts: list[dict] = []
        for _ in range(len(self.train_dataset) // max(count, 1) + 2):  # a bounded search: every pass is finite
            drawn = self._refill.draw(count - len(prompts), exclude=set(self.filtered_registry))
            prompts += [row for row in (self.train_dataset[i] for i in drawn) if prompt_key(row["prompt"]) not in seen]
            if len(prompts) >= count:
                break
        else:  # a dataset (nearly) all in this batch: repeat prompts rather than draw no round
            prompts += [self.train_dataset[i] for i in self._refill.draw(count - len(prompts))]
        return prompts

    def _assemble(self, refs: list[dict], local_rows: int) -> list[dict]:
        """This rank's rows of the final batch (positions ``rank × local_rows ...``): its own rows from its store, the
        others' from one exchange that carries only the rows changing rank; padding rows are the one-token template."""
        me, ranks = self.accelerator.process_index, self.accelerator.num_processes
        outgoing = [
            (position, self._row_store[ref["key"]])
            for position, ref in enumerate(refs)
            if not ref.get("pad") and ref["owner"] == me and position // local_rows != me
        ]
        arriving = {}
        if ranks > 1:
            for part in gather_object([outgoing]):
                for position, record in part:
                    if position // local_rows == me:
                        arriving[position] = record
        records = []
        for position in range(me * local_rows, (me + 1) * local_rows):
            ref = refs[position]
            if ref.get("pad"):
                records.append(self._pad_template)  # a one-token row of this rank's first generation
            else:
                records.append(self._row_store[ref["key"]] if ref["owner"] == me else arriving[position])
        self._row_store.clear()
        return records

    def _readmit(self, needed: int) -> list[int]:
        """At the first generation round at or after each multiple of ``recheck_filtered_every`` optimizer steps,
        re-admit prompts filtered at least that many steps ago, oldest first (at most one batch of them); they go
        through the probe when it is on (method §3.1)."""
        due = self._recheck.readmit(self.filtered_registry, self.calls.global_step(), needed)
        for index in due:
            del self.filtered_registry[index]
        return due

    def _update_registry(self, metrics: dict, candidates: list[dict], selection, readmitted: list[int]) -> None:
        if self.plan.recheck_filtered_every is None:
            return
        step = self.calls.global_step()
        passed = 0
        for candidate in candidates:
            index = self._prompt_index.get(prompt_key(candidate["inputs"][0]["prompt"]))
            if index is None:
                continue
            if candidate["keep"]:
                passed += index in readmitted
                self.filtered_registry.pop(index, None)
            elif candidate["all_correct"] or candidate["all_wrong"]:
                outcome = "all_correct" if candidate["all_correct"] else "all_wrong"
                mean = None if math.isnan(candidate["mean"]) else candidate["mean"]
                self.filtered_registry[index] = {"step": step, "pass_rate": mean, "outcome": outcome}
        metrics["sampling/readmitted"].append(len(readmitted))
        metrics["sampling/readmitted_passed"].append(passed)
        metrics["sampling/registry_size"].append(len(self.filtered_registry))

    def _log_sampling(
        self, metrics: dict, candidates: list[dict], selection, rounds: int, total_rows: int, totals: dict
    ) -> None:
        chosen = set(selection.chosen)
        discarded = totals["discarded"] + sum(
            row_tokens(r) for i, c in enumerate(candidates) if i not in chosen for r in c["records"]
        )
        # this rank's shares (own rows only): one all-reduce per batch
        shares = torch.tensor([discarded, totals["probe"], totals["continuation"]], dtype=torch.float64)
        discarded, probe_tokens, continuation_tokens = (
            int(v) for v in self.accelerator.reduce(shares.to(self.accelerator.device), reduction="sum").tolist()
        )
        n = max(len(candidates), 1)
        generated = torch.cat([self._combined_rewards(c["rewards"]) for c in candidates]) if candidates else None
        if generated is not None and bool((~torch.isnan(generated)).any()):
            metrics["rollout/reward_mean"].append(float(generated.nanmean()))  # every scored answer of the rounds
        metrics["sampling/rounds"].append(rounds)
        metrics["sampling/frac_filtered"].append(sum(not c["keep"] for c in candidates) / n)
        metrics["sampling/frac_all_correct"].append(sum(c["all_correct"] for c in candidates) / n)
        metrics["sampling/frac_all_wrong"].append(sum(c["all_wrong"] for c in candidates) / n)
        metrics["sampling/padded_fraction"].append(selection.padding_rows / total_rows)
        metrics["sampling/groups"].append(len(selection.chosen))
        surplus = selection.surplus + totals["surplus"]
        metrics["sampling/surplus_groups"].append(surplus)
        metrics["tokens/discarded"].append(discarded)
        if self.plan.probe_generations:
            metrics["tokens/probe"].append(probe_tokens)
            metrics["tokens/continuation"].append(continuation_tokens)
            probe = self.plan.probe_generations
            rates = [r for r in totals["probe_rates"] if not math.isnan(r)]
            for v in range(probe + 1):  # histogram of probe pass rates, binned at multiples of 1/probe
                share = sum(round(r * probe) == v for r in rates) / max(len(rates), 1)
                metrics[f"probe/pass_rate_{v}_of_{probe}"].append(share)
        counters = self.sampling_counters
        counters["discarded_tokens"] += discarded
        counters["padded_rows"] += selection.padding_rows
        counters["surplus_groups"] += surplus
        counters["rounds"] += rounds
