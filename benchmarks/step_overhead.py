"""Update-step overhead of ``LooGspoTrainer`` against stock ``trl.GRPOTrainer`` (GSPO settings).

Compares, in one run of this script, on the same tiny local model (``trl_loo_gspo.tiny``; nothing is downloaded):

* **ours**: ``LooGspoTrainer`` + ``LooGspoConfig`` (defaults: LOO advantages, token-total aggregation);
* **stock**: ``trl.GRPOTrainer`` + ``GRPOConfig(importance_sampling_level="sequence", loss_type="dapo",
  scale_rewards="none")``, i.e. GSPO clipping with DAPO token aggregation, the closest stock configuration.

Both get identical settings otherwise (seed, batch size, ``num_generations``, ``max_completion_length``,
``gradient_accumulation_steps``, learning rate, ``epsilon=3e-4``, ``epsilon_high=4e-4``, fp32) and the same
deterministic ``rollout_func``: completions are seeded-random token ids (length uniform in
[completion_length/4, completion_length], ending with EOS) keyed on the prompts and the global step, so both trainers
train on exactly the same tokens and no generation is run.

What is timed: the *update* part of each optimizer step, i.e. the sum over its micro-batches of
``training_step`` wall time minus the time spent inside ``_generate_and_score_completions`` (rollout + rewards +
advantages). That covers the forward pass, the loss, the backward pass and each trainer's own bookkeeping
(metrics, LOO-GSPO's token counts and step closing); it excludes gradient clipping, ``optimizer.step`` and
``zero_grad``, which are the same ``transformers.Trainer`` code for both. On CUDA the wrappers synchronize first.

What is measured for memory:

* CPU: peak resident set size (``VmHWM`` of ``/proc/self/status``, reset through ``/proc/self/clear_refs`` just
  before ``train()``; ``ru_maxrss`` if that is unavailable) minus the RSS just before ``train()``: the memory the
  training run added on top of the built trainer (gradients, optimizer state, activations, buffers).
* CUDA: ``torch.cuda.max_memory_allocated()`` (peak reset just before ``train()``) minus the memory allocated just
  before ``train()``.

The absolute peaks are printed too. The PASS/FAIL memory figure is the ratio of the increments, which is the
stricter one (the absolute peak also holds the torch runtime, the weights and, on CPU, the libraries).

Protocol: R rounds; each round runs one *phase* per trainer, alternating the order (stock, ours), then
(ours, stock), ... (ABBA, to cancel slow drift). A phase builds a fresh model (same seeded weights), dataset and
trainer, runs ``warmup + steps`` optimizer steps with ``trainer.train()`` and keeps the median update time of the
last ``steps``. On CPU every phase runs in its own forked child process, so that each has a clean memory
high-water mark and no allocator state leaks from one trainer to the other; on CUDA phases run in this process
with ``torch.cuda.reset_peak_memory_stats``. The figures reported are the medians over rounds of the per-round
ratios ours/stock. Targets: time <= 1.03, memory <= 1.02. The script always exits 0 once it has figures (it is a
benchmark, not a test); it exits 1 only if a phase crashed.

Usage::

    python benchmarks/step_overhead.py                 # defaults: ~1-2 minutes on a 2-core CPU
    python benchmarks/step_overhead.py --rounds 9 --steps 6 --completion-length 128
"""

from __future__ import annotations

import os

# Stable timings: one thread everywhere, fixed before torch is imported. Silence TRL's rollout_func notice.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"

import argparse  # noqa: E402
import gc  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
import zlib  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer  # noqa: E402
from trl_loo_gspo.tiny import addition_dataset, char_tokenizer, leading_digit_reward, tiny_qwen2  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
hf_logging.set_verbosity_error()

TIME_TARGET = 1.03
MEMORY_TARGET = 1.02
VARIANTS = ("stock", "ours")


# ---------------------------------------------------------------------------------------------------- rollout
def make_rollout_func(tokenizer, completion_length: int, seed: int):
    """A deterministic stand-in for generation: same prompts + same global step -> same completions."""
    digit_ids = tokenizer.convert_tokens_to_ids(list("0123456789"))
    special = {tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id}
    body_ids = [i for i in range(len(tokenizer)) if i not in special]
    eos = tokenizer.eos_token_id
    min_length = max(2, completion_length // 4)

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        key = f"{seed}|{trainer.state.global_step}|" + "|".join(prompts)
        rng = random.Random(zlib.crc32(key.encode()))
        prompt_ids, completion_ids, logprobs = [], [], []
        for prompt in prompts:
            a, b = prompt.rstrip("=").split("+")
            leading = str(int(a) + int(b))[0]
            # Half the answers start with the right digit, so most groups carry a reward signal.
            first = tokenizer.convert_tokens_to_ids(leading) if rng.random() < 0.5 else rng.choice(digit_ids)
            length = rng.randint(min_length, completion_length)
            ids = [first] + [rng.choice(body_ids) for _ in range(length - 2)] + [eos]
            prompt_ids.append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            completion_ids.append(ids)
            logprobs.append([-1.0] * len(ids))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    return rollout_func


# ---------------------------------------------------------------------------------------------------- timing
def timed(base: type) -> type:
    """Subclass ``base`` so that it records, per optimizer step, training_step time minus generation time."""

    class Timed(base):
        _bench_sync = False

        def _bench_clock(self) -> float:
            if self._bench_sync:
                torch.cuda.synchronize()
            return time.perf_counter()

        def _generate_and_score_completions(self, inputs):
            start = self._bench_clock()
            output = super()._generate_and_score_completions(inputs)
            self._bench_generation += self._bench_clock() - start
            return output

        def training_step(self, model, inputs, num_items_in_batch):
            generation_before = self._bench_generation
            start = self._bench_clock()
            loss = super().training_step(model, inputs, num_items_in_batch)
            elapsed = self._bench_clock() - start
            self._bench_micro += elapsed - (self._bench_generation - generation_before)
            if self.accelerator.sync_gradients:
                self.bench_update_times.append(self._bench_micro)
                self._bench_micro = 0.0
            return loss

    Timed.__name__ = f"Timed{base.__name__}"
    return Timed


TimedStock = timed(GRPOTrainer)
TimedOurs = timed(LooGspoTrainer)


# ---------------------------------------------------------------------------------------------------- one phase
def common_config(args: argparse.Namespace, output_dir: str) -> dict[str, Any]:
    return dict(
        output_dir=output_dir,
        use_cpu=args.device == "cpu",
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=args.seed,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.completion_length,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=1e-5,
        epsilon=3e-4,
        epsilon_high=4e-4,
        max_steps=args.warmup + args.steps,
    )


def build_trainer(variant: str, args: argparse.Namespace, output_dir: str):
    tokenizer = char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=args.hidden, num_hidden_layers=args.layers, seed=args.seed)
    kwargs = common_config(args, output_dir)
    if variant == "ours":
        cls, config = TimedOurs, LooGspoConfig(**kwargs)
    else:
        cls = TimedStock
        config = GRPOConfig(importance_sampling_level="sequence", loss_type="dapo", scale_rewards="none", **kwargs)
    trainer = cls(
        model=model,
        reward_funcs=leading_digit_reward,
        args=config,
        train_dataset=addition_dataset(512, seed=args.seed),
        processing_class=tokenizer,
        rollout_func=make_rollout_func(tokenizer, args.completion_length, args.seed),
    )
    trainer._bench_sync = args.device == "cuda"
    trainer._bench_generation = 0.0
    trainer._bench_micro = 0.0
    trainer.bench_update_times = []
    return trainer


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def _peak_rss_kib(reset_ok: bool) -> int:
    if reset_ok:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def run_phase(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build a fresh trainer for ``variant``, train it, return its update times (s) and memory (MiB)."""
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = build_trainer(variant, args, output_dir)
        gc.collect()
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        else:
            base = _rss_kib() * 1024
            reset_ok = _reset_peak_rss()
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
        if args.device == "cuda":
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        else:
            peak = _peak_rss_kib(reset_ok) * 1024
        times = trainer.bench_update_times[args.warmup :]
        if len(times) != args.steps:
            raise RuntimeError(f"{variant}: expected {args.steps} timed steps, got {len(trainer.bench_update_times)}")
        losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
        del trainer
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    mib = 1024.0**2
    return {
        "times": times,
        "update_s": statistics.median(times),
        "peak_mib": peak / mib,
        "delta_mib": (peak - base) / mib,
        "wall_s": wall,
        "losses": losses,
    }


def _child(variant: str, args: argparse.Namespace, queue) -> None:
    try:
        queue.put(("ok", run_phase(variant, args)))
    except BaseException:  # report anything, including KeyboardInterrupt, to the parent
        queue.put(("error", traceback.format_exc()))


def run_phase_isolated(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """CPU: run the phase in a forked child (clean RSS high-water mark); CUDA: in this process."""
    if args.device == "cuda":
        return run_phase(variant, args)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=_child, args=(variant, args, queue))
    process.start()
    status, payload = queue.get()
    process.join()
    if status != "ok":
        raise PhaseError(f"{variant} phase failed in its child process:\n{payload}")
    return payload


class PhaseError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------------- report
def environment(args: argparse.Namespace) -> str:
    if args.device == "cuda":
        hardware = torch.cuda.get_device_name(0)
    else:
        hardware = f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs"
    return (
        f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"trl {trl.__version__}\n"
        f"device {args.device} ({hardware}); torch threads {torch.get_num_threads()}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )


def verdict(value: float, target: float) -> str:
    return "PASS" if value <= target else "FAIL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds; each runs one phase per trainer (ABBA order)")
    parser.add_argument("--steps", type=int, default=4, help="timed optimizer steps per phase")
    parser.add_argument("--warmup", type=int, default=2, help="discarded optimizer steps at the start of a phase")
    parser.add_argument("--hidden", type=int, default=256, help="model hidden size")
    parser.add_argument("--layers", type=int, default=4, help="model layers")
    parser.add_argument("--completion-length", type=int, default=128, help="max_completion_length")
    parser.add_argument("--batch-size", type=int, default=8, help="per_device_train_batch_size")
    parser.add_argument("--num-generations", type=int, default=4, help="answers per prompt")
    parser.add_argument("--grad-accum", type=int, default=2, help="gradient_accumulation_steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda if available")
    args = parser.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--rounds and --steps must be >= 1, --warmup >= 0")

    print("Update-step overhead: LooGspoTrainer (ours) vs trl.GRPOTrainer (stock, GSPO + dapo)")
    print(environment(args))
    print(
        f"model: tiny Qwen2 hidden={args.hidden} layers={args.layers}; batch={args.batch_size} "
        f"num_generations={args.num_generations} grad_accum={args.grad_accum} "
        f"completion_length<={args.completion_length}; {args.rounds} rounds x ({args.warmup} warm-up + "
        f"{args.steps} timed) optimizer steps per phase"
    )
    memory_kind = "peak RSS - RSS before train()" if args.device == "cpu" else "max_memory_allocated - allocated"
    print(f"time = training_step - generation, median over a phase's steps; memory = {memory_kind}\n")

    header = (
        f"{'round':>5}  {'order':<11}  {'stock ms':>9}  {'ours ms':>9}  {'time x':>7}  "
        f"{'stock MiB':>9}  {'ours MiB':>9}  {'mem x':>7}  {'stock peak':>10}  {'ours peak':>10}"
    )
    print(header)
    print("-" * len(header))
    time_ratios, memory_ratios, peak_ratios = [], [], []
    all_times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    losses: dict[str, list[float]] = {}
    started = time.perf_counter()
    for round_index in range(args.rounds):
        order = VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]
        results = {}
        for variant in order:
            try:
                results[variant] = run_phase_isolated(variant, args)
            except PhaseError as error:
                print(f"\n{error}", file=sys.stderr)
                return 1
        stock, ours = results["stock"], results["ours"]
        time_ratios.append(ours["update_s"] / stock["update_s"])
        memory_ratios.append(ours["delta_mib"] / stock["delta_mib"])
        peak_ratios.append(ours["peak_mib"] / stock["peak_mib"])
        for variant in VARIANTS:
            all_times[variant].extend(results[variant]["times"])
            losses.setdefault(variant, results[variant]["losses"])
        print(
            f"{round_index:>5}  {','.join(order):<11}  {stock['update_s'] * 1e3:>9.1f}  {ours['update_s'] * 1e3:>9.1f}  "
            f"{time_ratios[-1]:>7.3f}  {stock['delta_mib']:>9.1f}  {ours['delta_mib']:>9.1f}  "
            f"{memory_ratios[-1]:>7.3f}  {stock['peak_mib']:>10.1f}  {ours['peak_mib']:>10.1f}",
            flush=True,
        )

    time_ratio = statistics.median(time_ratios)
    memory_ratio = statistics.median(memory_ratios)
    pooled = statistics.median(all_times["ours"]) / statistics.median(all_times["stock"])
    print()
    print(
        f"update time  ours/stock: median of round ratios {time_ratio:.3f} (min {min(time_ratios):.3f}, "
        f"max {max(time_ratios):.3f}); pooled step medians {pooled:.3f}   target <= {TIME_TARGET:.2f}: "
        f"{verdict(time_ratio, TIME_TARGET)}"
    )
    print(
        f"peak memory  ours/stock: median of round ratios {memory_ratio:.3f} (min {min(memory_ratios):.3f}, "
        f"max {max(memory_ratios):.3f}); absolute peaks {statistics.median(peak_ratios):.3f}   "
        f"target <= {MEMORY_TARGET:.2f}: {verdict(memory_ratio, MEMORY_TARGET)}"
    )
    print(
        "first-phase train losses (not comparable across trainers: different aggregation and advantages): "
        + "; ".join(f"{v} {[round(x, 4) for x in losses[v]]}" for v in VARIANTS)
    )
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
