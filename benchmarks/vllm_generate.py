"""What vLLM (the CPU build) costs and gains against transformers' ``generate`` for the tiny policy.

Run from the vLLM venv of ``.ci/vllm-job`` (``.ci-vllm-venv``, with ``tests/vllm_engine/cpu_plugin`` installed)::

    export OMP_NUM_THREADS=2 VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1
    .ci-vllm-venv/bin/python benchmarks/vllm_generate.py

Measures, for the same tiny Qwen2 (hidden 128, 2 layers, ~0.5M parameters, fp32): the start of a colocated engine
(eager, as the tests run it), the time to sample the same batch (prompts x answers x fixed length) with
``LLM.generate`` and with ``model.generate``, tokens/s, and the optimizer step time of ``LooGspoTrainer`` with
``use_vllm=True`` (colocate) against the plain trainer (transformers' generate; a whole step: generation, rewards,
the extra old-log-prob forward pass TRL runs for vLLM's importance-sampling correction, update). Medians over
repeats (and the fastest repeat, as the machine may be shared); writes
``benchmarks/results/vllm_vs_generate.{json,png}``. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer  # noqa: E402
from trl_loo_gspo.demo.tiny import addition_dataset, char_tokenizer, digit_fraction_reward, tiny_qwen2  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def save_policy(folder: Path) -> Path:
    tokenizer = char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=128, num_hidden_layers=2, seed=0)  # head_dim 32: servable on CPU
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class EngineTimer:
    """Stand-in for TRL's ``LLM``: eager fp32 engine (as in tests/vllm_engine), construction timed."""

    def __init__(self, llm_class: type) -> None:
        self.llm_class = llm_class
        self.seconds = 0.0
        self.llm: Any = None

    def __call__(self, **kwargs: Any) -> Any:
        start = time.perf_counter()
        self.llm = self.llm_class(**kwargs, enforce_eager=True, dtype="float32")
        self.seconds = time.perf_counter() - start
        return self.llm


def train(policy: Path, out: Path, use_vllm: bool, args: argparse.Namespace) -> LooGspoTrainer:
    config = LooGspoConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        seed=0,
        learning_rate=1e-4,
        max_steps=args.steps,
        per_device_train_batch_size=args.prompts * args.answers,
        num_generations=args.answers,
        max_completion_length=args.tokens,
        dataloader_num_workers=0,
        use_vllm=use_vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        disable_tqdm=True,
    )
    trainer = LooGspoTrainer(
        model=str(policy),
        reward_funcs=digit_fraction_reward,
        args=config,
        train_dataset=addition_dataset(args.prompts * args.steps * 2, seed=5),
        processing_class=char_tokenizer(),
    )
    trainer.train()
    return trainer


def step_times(trainer: LooGspoTrainer, warmup: int) -> list[float]:
    return [row["step_time"] for row in trainer.state.log_history if "step_time" in row][warmup:]


def generation_times(llm: Any, model: torch.nn.Module, args: argparse.Namespace) -> dict[str, list[float]]:
    """Same prompts, answers and exact length (EOS ignored) through vLLM and through ``model.generate``."""
    from vllm import SamplingParams, TokensPrompt

    tokenizer = char_tokenizer()
    prompts = [row["prompt"] for row in addition_dataset(args.prompts, seed=9)]
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    params = SamplingParams(n=args.answers, max_tokens=args.tokens, min_tokens=args.tokens, ignore_eos=True, seed=0)
    batch = tokenizer([p for p in prompts for _ in range(args.answers)], return_tensors="pt", padding=True)
    model.eval()
    times: dict[str, list[float]] = {"vllm": [], "transformers": []}
    for repeat in range(args.repeats + 1):  # the first round warms both up and is dropped
        start = time.perf_counter()
        outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False)
        vllm_s = time.perf_counter() - start
        assert sum(len(c.token_ids) for o in outputs for c in o.outputs) == args.prompts * args.answers * args.tokens
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(
                **batch, do_sample=True, max_new_tokens=args.tokens, min_new_tokens=args.tokens, top_k=0, top_p=1.0
            )
        hf_s = time.perf_counter() - start
        if repeat:
            times["vllm"].append(vllm_s)
            times["transformers"].append(hf_s)
    return times


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    panels = [
        ("sampling one batch (s)", result["generation_s"]),
        ("tokens / s", result["tokens_per_s"]),
        ("optimizer step (s)", result["step_s"]),
    ]
    for axis, (title, figures) in zip(axes, panels, strict=True):
        names = ["vllm", "transformers"]
        bars = axis.bar(names, [figures[n] for n in names], color=["#4c72b0", "#999999"])
        axis.bar_label(bars, fmt="%.3g")
        axis.set_title(f"{title}\nratio vLLM/transformers {figures['ratio']:.2f}")
    shape = result["shape"]
    fig.suptitle(
        f"vLLM {result['versions']['vllm']} (CPU, eager, fp32) vs transformers generate: tiny Qwen2 "
        f"{result['parameters'] / 1e6:.2f}M params, {shape['prompts']}x{shape['answers']} answers x "
        f"{shape['tokens']} tokens; engine start {result['engine_start_s']:.1f} s (not in the bars)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--answers", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32, help="completion length (generation: exact)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per trainer (first 2 dropped)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import trl.generation.vllm_generation as trl_vllm
    import vllm

    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        policy = save_policy(Path(tmp) / "policy")
        plain = train(policy, Path(tmp) / "plain", use_vllm=False, args=args)
        engine = EngineTimer(trl_vllm.LLM)
        trl_vllm.LLM = engine  # this process only
        colocate = train(policy, Path(tmp) / "colocate", use_vllm=True, args=args)
        generation = generation_times(engine.llm, colocate.model, args)
        parameters = sum(p.numel() for p in colocate.model.parameters())

    tokens = args.prompts * args.answers * args.tokens
    gen = {name: statistics.median(values) for name, values in generation.items()}
    steps = {
        "vllm": statistics.median(step_times(colocate, 2)),
        "transformers": statistics.median(step_times(plain, 2)),
    }
    result: dict[str, Any] = {
        "shape": {"prompts": args.prompts, "answers": args.answers, "tokens": args.tokens},
        "parameters": parameters,
        "engine_start_s": engine.seconds,
        "generation_s": {**gen, "ratio": gen["vllm"] / gen["transformers"]},
        "tokens_per_s": {
            "vllm": tokens / gen["vllm"],
            "transformers": tokens / gen["transformers"],
            "ratio": gen["transformers"] / gen["vllm"],
        },
        "step_s": {**steps, "ratio": steps["vllm"] / steps["transformers"]},
        "min_s": {  # the machine is shared: the fastest repeat is the least disturbed one
            "generation": {name: min(values) for name, values in generation.items()},
            "step": {"vllm": min(step_times(colocate, 2)), "transformers": min(step_times(plain, 2))},
        },
        "raw": {
            "generation_s": generation,
            "step_s": {"vllm": step_times(colocate, 0), "plain": step_times(plain, 0)},
        },
        "repeats": args.repeats,
        "steps_dropped": 2,
        "versions": {"vllm": vllm.__version__, "torch": torch.__version__},
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average_1min": {"start": load_start, "end": os.getloadavg()[0]},  # other jobs on the machine
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vllm_vs_generate.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / "vllm_vs_generate.png")
    print(json.dumps({k: result[k] for k in ("engine_start_s", "generation_s", "tokens_per_s", "step_s")}, indent=2))


if __name__ == "__main__":
    main()
