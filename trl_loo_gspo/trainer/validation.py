"""Independent validation at fixed rollout-token checkpoints (method §5.2).

The primary metric is the pass rate on an independent validation set at the same budget. This callback
evaluates it during training — pass@1 with greedy decoding and the mean pass rate over ``samples`` answers at a
fixed temperature — with the registered verifier, every ``every_tokens`` *generated* tokens (not every N steps:
runs of different methods are compared at equal rollout budget), and logs ``eval/pass_at_1``, ``eval/pass_rate``
and ``eval/unscorable`` against ``rollout_tokens``. Training-time filtering never touches this set: every problem is
evaluated every time.

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
    ) -> None:
        if every_tokens <= 0:
            raise ValueError(f"every_tokens must be > 0, got {every_tokens}")
        self.trainer, self.dataset, self.verifier = trainer, dataset, verifier
        self.every_tokens, self.samples, self.temperature = every_tokens, samples, temperature
        self.max_new_tokens = max_new_tokens or trainer.args.max_completion_length
        self.batch_size, self.pass_threshold, self.at_start, self.seed = batch_size, pass_threshold, at_start, seed
        self.next_checkpoint = every_tokens
        self.history: list[dict[str, float]] = []

    # ------------------------------------------------------------------ run state (checkpoints)
    def state_dict(self) -> dict[str, Any]:
        """The evaluations so far and the next token checkpoint (saved with the trainer's run state, so a resumed
        run neither evaluates again at "start" nor loses the earlier points of its curve)."""
        return {"history": [dict(point) for point in self.history], "next_checkpoint": self.next_checkpoint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [dict(point) for point in state["history"]]
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
            self.evaluate()
        return control

    # ------------------------------------------------------------------ evaluation
    def _prompt_text(self, prompt: Any) -> str:
        tokenizer = self.trainer.processing_class
        if isinstance(prompt, str):
            return prompt
        return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)

    @torch.no_grad()
    def _generate(self, model, texts: list[str], sample: bool, synced: bool) -> list[str]:
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
                options["num_return_sequences"] = self.samples
            else:
                options["do_sample"] = False
            generated = model.generate(**encoded, **options)
            outputs.extend(
                tokenizer.batch_decode(generated[:, encoded["input_ids"].size(1) :], skip_special_tokens=True)
            )
        return outputs

    @torch.no_grad()
    def _decode(self, model, texts: list[str]) -> tuple[list[str], list[str]]:
        """Greedy answers and ``samples`` sampled answers per prompt from one lean loop per batch
        (:func:`~trl_loo_gspo.trainer.decoding.decode`: the same distributions as ``generate``, at a fraction of
        the cost)."""
        tokenizer = self.trainer.processing_class
        greedy: list[str] = []
        sampled: list[str] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            encoded = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            greedy_ids, sampled_ids = decode(
                model,
                encoded["input_ids"].to(model.device),
                encoded["attention_mask"].to(model.device),
                max_new_tokens=self.max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                samples=self.samples,
                temperature=self.temperature,
            )
            greedy.extend(tokenizer.batch_decode(greedy_ids, skip_special_tokens=True))
            if sampled_ids is not None:
                sampled.extend(tokenizer.batch_decode(sampled_ids, skip_special_tokens=True))
        return greedy, sampled

    def _scores(self, rows: list[dict], completions: list[str], repeat: int) -> list[float | None]:
        columns = {key: [row[key] for row in rows for _ in range(repeat)] for key in rows[0] if key != "prompt"}
        prompts = [row["prompt"] for row in rows for _ in range(repeat)]
        return self.verifier(prompts=prompts, completions=completions, completion_ids=None, **columns)

    def evaluate(self) -> dict[str, float]:
        """Evaluate now; every process takes its share of the problems; the result is logged and returned.

        Every process must call this (it gathers the scores; with sharded parameters, generation is collective)."""
        trainer = self.trainer
        accelerator = trainer.accelerator
        synced = needs_synced_generation(accelerator)
        indices, real = rank_share(len(self.dataset), accelerator.process_index, accelerator.num_processes, synced)
        rows = [self.dataset[i] for i in indices]
        greedy: list[float | None] = []
        sampled: list[float | None] = []
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
                            answers, drawn = self._decode(model, texts)
                        answers, drawn = answers[:real], drawn[: real * self.samples]
                    else:
                        answers = self._generate(model, texts, False, synced)[:real]  # padded rows never scored
                        if self.samples:
                            with preserved_rng():
                                torch.manual_seed(self.seed + len(self.history))
                                drawn = self._generate(model, texts, True, synced)[: real * self.samples]
                finally:
                    model.train(was_training)
            if real:
                greedy = self._scores(rows[:real], [completion_text(c) for c in answers], 1)
                if self.samples:
                    sampled = self._scores(rows[:real], drawn, self.samples)
        greedy_all = [s for part in gather_object([greedy]) for s in part]
        sampled_all = [s for part in gather_object([sampled]) for s in part]

        def rate(scores: list[float | None]) -> float:
            return sum(s is not None and s >= self.pass_threshold for s in scores) / max(len(scores), 1)

        result = {
            "rollout_tokens": float(trainer.generated_tokens_total),
            "step": float(trainer.state.global_step),
            "eval/pass_at_1": rate(greedy_all),
            "eval/pass_rate": rate(sampled_all) if self.samples else float("nan"),
            "eval/unscorable": sum(s is None for s in greedy_all + sampled_all)
            / max(len(greedy_all) + len(sampled_all), 1),
        }
        self.history.append(result)
        # transformers' Trainer.log (not GRPOTrainer.log, which would flush the step's pending training metrics)
        Trainer.log(trainer, dict(result))
        return result
