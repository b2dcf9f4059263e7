"""Validation shares under sharded engines (ZeRO-3, FSDP), in one process: every simulated process makes the same
generate calls with the same batch sizes and ``synced_gpus``, padded rows are never scored, and the gathered figures
equal one process's. The real two-process launches are in tests/test_engines.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from trl_loo_gspo.demo.tiny import char_tokenizer
from trl_loo_gspo.trainer import validation
from trl_loo_gspo.trainer.validation import ValidationCallback


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("rows", [0, 1, 2, 5, 129])
def test_rank_share_pads_every_process_to_the_same_size(rows, world):
    shares = [validation.rank_share(rows, rank, world, pad=True) for rank in range(world)]
    assert {len(indices) for indices, _ in shares} == {-(-rows // world)}  # the same on every process
    real = [i for indices, count in shares for i in indices[:count]]
    assert sorted(real) == list(range(rows))  # each problem exactly once among the real rows
    assert all(0 <= i < rows for indices, _ in shares for i in indices)  # padding repeats existing rows
    for rank in range(world):
        assert validation.rank_share(rows, rank, world, pad=False) == (
            list(range(rank, rows, world)),
            len(range(rank, rows, world)),
        )


class FakeModel:
    """Records each generate call; a row's answer is one character of its prompt (the 4th from the end)."""

    device = torch.device("cpu")
    training = True
    is_gradient_checkpointing = False

    def __init__(self) -> None:
        self.calls: list[tuple[int, bool, bool]] = []

    def eval(self):
        self.training = False

    def train(self, mode: bool = True):
        self.training = mode

    def generate(self, input_ids, attention_mask, num_return_sequences=1, do_sample=False, synced_gpus=None, **_):
        self.calls.append((input_ids.size(0), do_sample, synced_gpus))
        ids = input_ids.repeat_interleave(num_return_sequences, dim=0)
        return torch.cat([ids, ids[:, -4:-3]], dim=1)


def _evaluate(monkeypatch, rows: int, rank: int, world: int, sharded: bool) -> tuple[FakeModel, list, list, dict]:
    """One simulated process of ``world``: returns its generate calls, the scores it gathers and the prompts scored."""
    model, gathered, scored = FakeModel(), [], []
    plugin = SimpleNamespace(fsdp_version=2) if sharded else None
    accelerator = SimpleNamespace(
        process_index=rank,
        num_processes=world,
        state=SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=plugin),
        unwrap_model=lambda m: m,
    )
    trainer = SimpleNamespace(
        accelerator=accelerator,
        model=model,
        model_wrapped=model,
        processing_class=char_tokenizer(),
        args=SimpleNamespace(max_completion_length=4),
        generated_tokens_total=0,
        state=SimpleNamespace(global_step=0),
    )

    def gather_object(objects):
        gathered.append(objects[0])
        return objects

    def verifier(prompts, completions, answer, **_):
        scored.extend(prompts)
        return [None if a == "x" else float(c.strip() in "02468") for c, a in zip(completions, answer, strict=True)]

    monkeypatch.setattr(validation, "gather_object", gather_object)
    monkeypatch.setattr(validation.Trainer, "log", lambda *args, **kwargs: None)
    dataset = [{"prompt": f"{i}+{i % 7}=", "answer": "x" if i == 1 else str(i)} for i in range(rows)]
    callback = ValidationCallback(trainer, dataset, verifier, every_tokens=1, samples=2, batch_size=64)
    result = callback.evaluate()
    return model, gathered, scored, result


@pytest.mark.parametrize("rows", [1, 3, 129])
def test_sharded_processes_make_the_same_generate_calls_and_drop_padded_rows(monkeypatch, rows):
    """1 row: one process has none; 129 rows, batch size 64: 65 and 64 rows would be 2 and 1 generate calls."""
    world = 2
    runs = [_evaluate(monkeypatch, rows, rank, world, sharded=True) for rank in range(world)]
    calls = [model.calls for model, *_ in runs]
    assert calls[0] == calls[1]  # same number of generate calls, same batch sizes, on every process
    assert calls[0] and all(synced for *_, synced in calls[0])  # finished processes keep stepping (synced_gpus)
    greedy = [scores for _, (scores, _sampled, *_), _, _ in runs]
    sampled = [scores for _, (_greedy, scores, *_), _, _ in runs]
    for rank, (_, _, prompts, _) in enumerate(runs):
        real = len(range(rank, rows, world))
        assert len(greedy[rank]) == real and len(sampled[rank]) == 2 * real  # padded rows are never scored
        own = [f"{i}+{i % 7}=" for i in range(rank, rows, world)]
        assert prompts == own + [prompt for prompt in own for _ in (0, 1)]  # greedy, then 2 samples each
    # the gathered figures are one process's: every problem once, nothing padded
    _, _, _, single = _evaluate(monkeypatch, rows, 0, 1, sharded=False)
    flat_greedy, flat_sampled = greedy[0] + greedy[1], sampled[0] + sampled[1]
    passes = sum(s is not None and s >= 1.0 for s in flat_greedy)
    assert single["eval/pass_at_1"] == passes / rows
    assert single["eval/pass_rate"] == sum(s is not None and s >= 1.0 for s in flat_sampled) / (2 * rows)


def test_unsharded_processes_are_not_padded(monkeypatch):
    """DDP / ZeRO-2 (whole parameters on every process): shares stay as they were, nothing is generated twice."""
    model, (greedy, sampled, *_), _, _ = _evaluate(monkeypatch, 1, 1, 2, sharded=False)
    assert model.calls == [] and greedy == [] and sampled == []
    model, _, _, _ = _evaluate(monkeypatch, 3, 0, 2, sharded=False)
    assert [(rows, sample) for rows, sample, _ in model.calls] == [(2, False), (2, True)]
    assert not any(synced for *_, synced in model.calls)
