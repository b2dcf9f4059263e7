"""Independent validation at fixed rollout-token checkpoints (method §5.2).

The primary metric is the pass rate on an independent validation set at the same budget. This callback
evaluates it during training — pass@1 with greedy decoding and the mean pass rate over ``samples`` answers at a
fixed temperature — with the registered verifier, every ``every_tokens`` *generated* tokens (not every N steps:
runs of different methods are compared at equal rollout budget), and logs ``eval/pass_at_1``, ``eval/pass_rate``,
``eval/entropy`` (the policy's mean per-token entropy along its sampled answers) and ``eval/unscorable`` against
``rollout_tokens``. Training-time filtering never touches this set: every problem is evaluated every time. Each
evaluation also keeps its per-problem results in :attr:`ValidationCallback.details` (greedy pass, number of passing
sampled answers: what pass@k and per-stratum rates are computed from).

Under DeepSpeed ZeRO-3 and FSDP the parameters are sharded: every forward pass of ``generate`` is a collective, so
every process must make the same number of ``generate`` calls and take the same number of decoding steps. Each
process's share of the problems is then padded to the same number of rows (a repeated row whose answers are never
scored) and ``generate`` runs with ``synced_gpus=True`` (a finished process keeps stepping until all are done).
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers import Trainer, TrainerCallback
from trl.distributed import DistributedBackend
from trl.models import unwrap_model_for_generation

from ..verifiers.base import completion_text
from .decoding import decode, plain_generation


@contextmanager
def preserved_rng():
    """Save every random stream a validation pass may touch and restore it afterwards: torch's CPU generator, the
    generator of every CUDA device (``torch.manual_seed`` reseeds them all), Python's ``random`` and NumPy's global
    state."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    cpu_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


def rank_share(num_rows: int, rank: int, world: int, pad: bool) -> tuple[list[int], int]:
    """This process's rows (every ``world``-th index from ``rank``) and how many of them are real.

    With ``pad``, the share is padded to ``ceil(num_rows / world)`` rows -- the same on every process -- by repeating
    its last row (row 0 for a process without a row of its own); the padded rows come last and are never scored.
    """
    indices = list(range(rank, num_rows, world))
    real = len(indices)
    if pad and num_rows:
        indices += [indices[-1] if indices else 0] * (-(-num_rows // world) - real)
    return indices, real


def needs_synced_generation(accelerator) -> bool:
    """True when the parameters are sharded over several processes (DeepSpeed ZeRO-3, FSDP): ``generate``'s forward
    passes are then collectives, so every process must take the same generate calls and decoding steps."""
    if accelerator.num_processes < 2:
        return False
    backend = DistributedBackend(accelerator)
    return backend.is_zero3 or backend.is_fsdp


class ValidationCallback(TrainerCallback):
    """Evaluate a validation split at rollout-token checkpoints of a ``LooGspoTrainer``.

    Args:
        trainer: the trainer (its model, tokenizer and ``generated_tokens_total`` are read).
        dataset: the validation split (a map-style dataset with a ``prompt`` column and the verifier's columns).
        verifier: a TRL reward function / :class:`~trl_loo_gspo.verifiers.Verifier`; a score ≥ ``pass_threshold``
            is a pass, ``None`` (unscorable) is not and is counted in ``eval/unscorable``.
        every_tokens: evaluate each time the cumulative generated tokens cross a multiple of this.
        samples, temperature: the sampled pass rate's answers per problem and temperature (top-k and top-p off).
        max_new_tokens: generation limit (default: the trainer's ``max_completion_length``).
        at_start: also evaluate before the first step (at 0 tokens).
        curve_samples: sampled answers per problem at the points between the start and :meth:`finish` (default
            ``samples``; ``0``: greedy only there, e.g. when the primary metric is greedy and the sampled metrics
            are read at the start and the end only).
        strata: a column of ``dataset`` whose value labels each problem (e.g. ``"terms"``), kept with the
            per-problem results so that pass rates can be split by it.
    """

    def __init__(
        self,
        trainer,
        dataset,
        verifier,
        every_tokens: int,
        samples: int = 4,
        temperature: float = 1.0,
        max_new_tokens: int | None = None,
        batch_size: int = 64,
        pass_threshold: float = 1.0,
        at_start: bool = True,
        seed: int = 0,
        curve_samples: int | None = None,
        strata: str | None = None,
    ) -> None:
        if every_tokens <= 0:
            raise ValueError(f"every_tokens must be > 0, got {every_tokens}")
        if samples < 0 or (curve_samples is not None and not 0 <= curve_samples <= samples):
            raise ValueError(f"need samples >= 0 and 0 <= curve_samples <= samples, got {samples}, {curve_samples}")
        if strata is not None and strata not in dataset.column_names:
            raise ValueError(f"strata: no column {strata!r} in the validation split ({dataset.column_names})")
        self.trainer, self.dataset, self.verifier = trainer, dataset, verifier
        self.every_tokens, self.samples, self.temperature = every_tokens, samples, temperature
        self.curve_samples = samples if curve_samples is None else curve_samples
        self.strata = strata
        self.max_new_tokens = max_new_tokens or trainer.args.max_completion_length
        self.batch_size, self.pass_threshold, self.at_start, self.seed = batch_size, pass_threshold, at_start, seed
        self.next_checkpoint = every_tokens
        self.history: list[dict[str, float]] = []
        #: per evaluation (parallel to :attr:`history`): ``greedy`` (1/0 per problem, dataset order), ``successes``
        #: (passing sampled answers per problem, or ``None``), ``samples``, ``entropy`` ([summed nats, tokens] over
        #: the sampled answers, or ``None`` where ``generate`` decoded)
        self.details: list[dict[str, Any]] = []

    def labels(self) -> list[Any] | None:
        """Each problem's ``strata`` value, in dataset order (``None`` without ``strata``)."""
        return None if self.strata is None else list(self.dataset[self.strata])

    # ------------------------------------------------------------------ run state (checkpoints)
    def state_dict(self) -> dict[str, Any]:
        """The evaluations so far and the next token checkpoint (saved with the trainer's run state, so a resumed
        run neither evaluates again at "start" nor loses the earlier points of its curve)."""
        return {
            "history": [dict(point) for point in self.history],
            "details": [dict(detail) for detail in self.details],
            "next_checkpoint": self.next_checkpoint,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [dict(point) for point in state["history"]]
        empty = {"greedy": None, "successes": None, "samples": 0, "entropy": None}  # (a state saved before details)
        self.details = [dict(detail) for detail in state.get("details", [empty] * len(self.history))]
        self.next_checkpoint = state["next_checkpoint"]

    # ------------------------------------------------------------------ callback hooks
    def on_train_begin(self, args, state, control, **kwargs):
        if self.at_start and not self.history:
            self.evaluate()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        tokens = self.trainer.generated_tokens_total
        if tokens >= self.next_checkpoint:
            while self.next_checkpoint <= tokens:
                self.next_checkpoint += self.every_tokens
            self.evaluate(samples=self.curve_samples)
        return control

    def finish(self) -> dict[str, float]:
        """The run's final point, with all ``samples``: evaluate now unless the last point is at the current token
        count with every sample (a point taken there with fewer, ``curve_samples``, is replaced); return it. Every
        process must call this."""
        tokens = float(self.trainer.generated_tokens_total)
        if self.history and self.history[-1]["rollout_tokens"] == tokens:
            if self.details[-1]["samples"] == self.samples:
                return self.history[-1]
            self.history.pop()
            self.details.pop()
        return self.evaluate()

    # ------------------------------------------------------------------ evaluation
    def _prompt_text(self, prompt: Any) -> str:
        tokenizer = self.trainer.processing_class
        if isinstance(prompt, str):
            return prompt
        return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)

    @torch.no_grad()
    def _generate(self, model, texts: list[str], sample: int, synced: bool) -> list[str]:
        tokenizer = self.trainer.processing_class
        outputs: list[str] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            encoded = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            encoded = {key: value.to(model.device) for key, value in encoded.items()}
            options: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
            # transformers only syncs by itself under ZeRO-3 and its own FSDP2 wrapper, not accelerate's fully_shard
            options["synced_gpus"] = synced
            if sample:
                options.update(do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0)
                options["num_return_sequences"] = sample
            else:
                options["do_sample"] = False
            generated = model.generate(**encoded, **options)
            outputs.extend(
                tokenizer.batch_decode(generated[:, encoded["input_ids"].size(1) :], skip_special_tokens=True)
            )
        return outputs

    @torch.no_grad()
    def _decode(self, model, texts: list[str], samples: int) -> tuple[list[str], list[str], list[float]]:
        """Greedy answers, ``samples`` sampled answers per prompt and [summed entropy, tokens] over the sampled
        answers, from one lean loop per batch (:func:`~trl_loo_gspo.trainer.decoding.decode`: the same distributions
        as ``generate``, at a fraction of the cost)."""
        tokenizer = self.trainer.processing_class
        greedy: list[str] = []
        sampled: list[str] = []
        entropy = [0.0, 0.0]
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            encoded = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            greedy_ids, sampled_ids, sums = decode(
                model,
                encoded["input_ids"].to(model.device),
                encoded["attention_mask"].to(model.device),
                max_new_tokens=self.max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                samples=samples,
                temperature=self.temperature,
                with_entropy=True,
            )
            greedy.extend(tokenizer.batch_decode(greedy_ids, skip_special_tokens=True))
            if sampled_ids is not None:
                sampled.extend(tokenizer.batch_decode(sampled_ids, skip_special_tokens=True))
                entropy = [entropy[0] + float(sums[0].sum()), entropy[1] + float(sums[1].sum())]
        return greedy, sampled, entropy

    def _scores(self, rows: list[dict], completions: list[str], repeat: int) -> list[float | None]:
        columns = {key: [row[key] for row in rows for _ in range(repeat)] for key in rows[0] if key != "prompt"}
        prompts = [row["prompt"] for row in rows for _ in range(repeat)]
        return self.verifier(prompts=prompts, completions=completions, completion_ids=None, **columns)

    def evaluate(self, samples: int | None = None) -> dict[str, float]:
        """Evaluate now with ``samples`` sampled answers per problem (default: all ``samples``); every process takes
        its share of the problems; the result is logged and returned, its per-problem results kept in
        :attr:`details`.

        Every process must call this (it gathers the scores; with sharded parameters, generation is collective)."""
        trainer = self.trainer
        accelerator = trainer.accelerator
        n = self.samples if samples is None else samples
        synced = needs_synced_generation(accelerator)
        world = accelerator.num_processes
        indices, real = rank_share(len(self.dataset), accelerator.process_index, world, synced)
        rows = [self.dataset[i] for i in indices]
        greedy: list[float | None] = []
        sampled: list[float | None] = []
        entropy: list[float] | None = None if rows else [0.0, 0.0]  # (a process without a problem adds nothing)
        if rows:
            texts = [self._prompt_text(row["prompt"]) for row in rows]
            # as TRL's GRPOTrainer generates: ZeRO-3 parameters gathered (ds3_gather_for_generation), FSDP1 summoned
            gather = getattr(trainer.args, "ds3_gather_for_generation", True)
            wrapped = trainer.model_wrapped
            with (
                unwrap_model_for_generation(wrapped, accelerator, gather_deepspeed3_params=gather) as model,
                DistributedBackend(accelerator).summon_full_params(wrapped, recurse=False),
            ):
                was_training = model.training
                model.eval()
                try:
                    if not synced and plain_generation(model):  # one prefill per prompt, ended rows dropped
                        with preserved_rng():  # training's RNG streams continue as if validation had not run
                            torch.manual_seed(self.seed + len(self.history))  # CPU and every CUDA device
                            answers, drawn, entropy = self._decode(model, texts, n)
                        answers, drawn = answers[:real], drawn[: real * n]
                    else:
                        answers = self._generate(model, texts, 0, synced)[:real]  # padded rows never scored
                        if n:
                            with preserved_rng():
                                torch.manual_seed(self.seed + len(self.history))
                                drawn = self._generate(model, texts, n, synced)[: real * n]
                finally:
                    model.train(was_training)
            if real:
                greedy = self._scores(rows[:real], [completion_text(c) for c in answers], 1)
                if n:
                    sampled = self._scores(rows[:real], drawn, n)
        greedy_parts = gather_object([greedy])
        sampled_parts = gather_object([sampled])
        entropy_parts = gather_object([entropy])
        index_parts = gather_object([indices[:real]])  # which problems each process scored (padding excluded)
        greedy_all = [s for part in greedy_parts for s in part]
        sampled_all = [s for part in sampled_parts for s in part]

        def passed(score: float | None) -> bool:
            return score is not None and score >= self.pass_threshold

        # [summed entropy, tokens] over every process's sampled answers (unknown where any decoded with generate)
        measured = None if None in entropy_parts else [sum(part[i] for part in entropy_parts) for i in (0, 1)]
        successes = None
        if n:
            counts = [[sum(map(passed, part[j : j + n])) for j in range(0, len(part), n)] for part in sampled_parts]
            successes = problem_order(counts, index_parts, len(self.dataset))
        self.details.append(
            {
                "greedy": problem_order(
                    [[int(passed(s)) for s in part] for part in greedy_parts], index_parts, len(self.dataset)
                ),
                "successes": successes,
                "samples": n,
                "entropy": measured if n else None,
            }
        )
        result = {
            "rollout_tokens": float(trainer.generated_tokens_total),
            "step": float(trainer.state.global_step),
            "eval/pass_at_1": sum(map(passed, greedy_all)) / max(len(greedy_all), 1),
            "eval/pass_rate": sum(map(passed, sampled_all)) / max(len(sampled_all), 1) if n else float("nan"),
            "eval/entropy": measured[0] / measured[1] if n and measured and measured[1] else float("nan"),
            "eval/unscorable": sum(s is None for s in greedy_all + sampled_all)
            / max(len(greedy_all) + len(sampled_all), 1),
        }
        self.history.append(result)
        # transformers' Trainer.log (not GRPOTrainer.log, which would flush the step's pending training metrics)
        Trainer.log(trainer, dict(result))
        return result


def problem_order(parts: list[list[Any]], index_parts: list[list[int]], size: int) -> list[Any]:
    """Per-problem values in dataset order (``size`` problems) from each process's values and the dataset indices
    they belong to (gathered alike); a problem no process reported stays ``None``."""
    ordered: list[Any] = [None] * size
    for part, index in zip(parts, index_parts, strict=True):
        for i, value in zip(index, part, strict=True):
            ordered[i] = value
    return ordered
