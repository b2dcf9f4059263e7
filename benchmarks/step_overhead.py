"""Update-step overhead of ``LooGspoTrainer`` against stock ``trl.GRPOTrainer`` (GSPO settings).

Compares, in one run of this script, on the same tiny local model (``trl_loo_gspo.demo.tiny``; nothing is downloaded):

* **ours**: ``LooGspoTrainer`` + ``LooGspoConfig`` (its defaults: LOO advantages, token-total aggregation);
* **stock**: ``trl.GRPOTrainer`` + ``GRPOConfig(importance_sampling_level="sequence", loss_type="dapo",
  scale_rewards="none")``: GSPO's sequence-level clipped ratio with DAPO token aggregation, the closest stock setup.

Both get identical settings otherwise (seed, batch size, ``num_generations``, ``max_completion_length``,
``gradient_accumulation_steps``, learning rate, ``epsilon=3e-4``, ``epsilon_high=4e-4``, fp32, TRL's default
gradient checkpointing) and the same deterministic ``rollout_func``: completions are seeded-random token ids (length
uniform in [completion_length/4, completion_length], ending with EOS, half of them starting with the right leading
digit so that most groups carry a reward signal) keyed on the prompts and the global step. Both trainers therefore
train on exactly the same tokens, and no generation is run. The script checks this: the logged losses must differ by
exactly K/(K-1) (LOO vs group-mean advantages over the same token denominator).

Time: the *update* part of each optimizer step, i.e. the sum over its micro-batches of ``training_step`` wall time
minus the time spent inside ``_generate_and_score_completions`` (rollout, rewards, advantages). That covers the
forward pass, the loss, the backward pass and each trainer's own bookkeeping (metrics; for LOO-GSPO also its token
counts and step closing); it excludes gradient clipping, ``optimizer.step`` and ``zero_grad``, which are the same
``transformers.Trainer`` code for both. On CUDA the clock synchronizes first. A phase's figure is the median over its
timed steps (the first ``--warmup`` steps are discarded).

Memory:

* CPU: RSS is all there is (torch's CPU allocator keeps no peak counter, and ``tracemalloc`` does not see tensors),
  so every memory figure comes from a dedicated forked child: it sets glibc's mmap threshold to 64 KiB (so freed
  tensors go back to the OS at once and RSS tracks live memory to ~0.2%; this slows steps down, which is why memory
  phases are not timed), runs a throwaway one-step training (so that one-time costs, lazy imports and the library
  code pages every op touches, are already resident), builds the measured trainer, resets the kernel's high-water
  mark (``/proc/self/clear_refs``), trains ``--memory-steps`` steps and reads ``VmHWM``. Reported: peak RSS minus
  the RSS just before ``train()`` (gradients, optimizer state, activations, buffers), and the absolute peak.
* CUDA: ``torch.cuda.max_memory_allocated()`` (reset just before ``train()``) minus the memory allocated just
  before ``train()``, measured in the timing phase itself; the absolute peak too.

The PASS/FAIL memory figure is the ratio of the increments, the stricter one (the absolute peak also holds the
weights and, on CPU, the Python/torch runtime).

Protocol: ``--rounds`` rounds; each round runs the phases of both trainers, alternating the order (stock, ours),
(ours, stock), ... (ABBA, to cancel slow drift). A phase builds a fresh model (same seeded weights), dataset and
trainer and calls ``trainer.train()`` for a fixed number of optimizer steps. On CPU each phase (timing or memory)
runs in its own forked child process: a clean heap and high-water mark, and no allocator or cache state leaking
from one trainer to the other; on CUDA one phase per trainer runs in this process. The reported figures are the
medians over rounds of the per-round ratios ours/stock, against the targets time <= 1.03 and memory <= 1.02. The
script exits 0 whatever the verdict (it is a benchmark, not a test); it exits 1 only if a phase crashed.

Usage::

    python benchmarks/step_overhead.py                  # defaults: ~2.5 minutes on a 2-core CPU
    python benchmarks/step_overhead.py --rounds 4 --steps 3 --completion-length 64   # quicker, noisier
"""

from __future__ import annotations

import os

# Stable timings: one thread everywhere, fixed before torch is imported. Silence TRL's rollout_func notice.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"

import argparse  # noqa: E402
import ctypes  # noqa: E402
import ctypes.util  # noqa: E402
import gc  # noqa: E402
import logging  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import queue as queue_module  # noqa: E402
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
from transformers import PrinterCallback  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer  # noqa: E402
from trl_loo_gspo.demo.tiny import addition_dataset, char_tokenizer, leading_digit_reward, tiny_qwen2  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
hf_logging.set_verbosity_error()
logging.getLogger("trl").setLevel(logging.ERROR)  # e.g. TRL's note that 'dapo' + sequence-level weights by length

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
def common_config(args: argparse.Namespace, output_dir: str, max_steps: int) -> dict[str, Any]:
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
        max_steps=max_steps,
    )


def build_trainer(variant: str, args: argparse.Namespace, output_dir: str, max_steps: int):
    tokenizer = char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=args.hidden, num_hidden_layers=args.layers, seed=args.seed)
    kwargs = common_config(args, output_dir, max_steps)
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
    trainer.remove_callback(PrinterCallback)  # no per-step log dicts on stdout
    trainer._bench_sync = args.device == "cuda"
    trainer._bench_generation = 0.0
    trainer._bench_micro = 0.0
    trainer.bench_update_times = []
    return trainer


def _proc_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _proc_status_kib("VmHWM") is not None
    except OSError:
        return False


def _tune_malloc() -> bool:
    """glibc only: serve every allocation >= 64 KiB with mmap and return freed memory at once.

    Without this, glibc's dynamic mmap threshold and heap fragmentation make the peak RSS of two identical runs differ
    by up to ~10%; with it the RSS follows the live tensor bytes to ~1%. It also makes steps much slower, which is why
    memory phases are not timed.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 64 * 1024) and libc.mallopt(m_trim_threshold, 64 * 1024))
    except (OSError, AttributeError):
        return False


def run_phase(variant: str, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build a fresh trainer for ``variant`` and train it.

    ``kind="time"``: ``warmup + steps`` optimizer steps, returns the update times of the last ``steps`` (s).
    ``kind="memory"``: ``memory_steps`` optimizer steps, returns the peak memory and its increment over the memory just
    before ``train()`` (MiB). ``kind="both"`` (CUDA, where the peak counter is exact and free): both.
    """
    measure_memory = kind in ("memory", "both")
    tuned = _tune_malloc() if kind == "memory" else False
    max_steps = args.memory_steps if kind == "memory" else args.warmup + args.steps
    with tempfile.TemporaryDirectory() as output_dir:
        if kind == "memory":
            # A throwaway one-step run first, so that the code pages of every op both phases use are already
            # resident: RSS counts them, and they would otherwise show up as "training memory".
            warm = build_trainer(variant, args, output_dir, 1)
            warm.train()
            del warm
            gc.collect()
        trainer = build_trainer(variant, args, output_dir, max_steps)
        gc.collect()
        base = peak = 0
        reset_ok = False
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        elif measure_memory:
            if tuned:
                ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
            base = (_proc_status_kib("VmRSS") or 0) * 1024
            reset_ok = _reset_peak_rss()
        trainer.train()
        if args.device == "cuda":
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        elif measure_memory:
            hwm = _proc_status_kib("VmHWM") if reset_ok else None
            peak = 1024 * (hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        recorded = trainer.bench_update_times
        if len(recorded) != max_steps:
            raise RuntimeError(f"{variant}: expected {max_steps} optimizer steps, recorded {len(recorded)}")
        losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
        del trainer
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    mib = 1024.0**2
    result: dict[str, Any] = {"losses": losses}
    if kind in ("time", "both"):
        result["times"] = recorded[args.warmup :]
        result["update_s"] = statistics.median(result["times"])
    if measure_memory:
        result.update(peak_mib=peak / mib, delta_mib=(peak - base) / mib, malloc_tuned=tuned, hwm_reset=reset_ok)
    return result


class PhaseError(RuntimeError):
    pass


def _child(variant: str, kind: str, args: argparse.Namespace, queue) -> None:
    try:
        queue.put(("ok", run_phase(variant, kind, args)))
    except BaseException:  # report anything, including KeyboardInterrupt, to the parent
        queue.put(("error", traceback.format_exc()))


def run_phase_isolated(variant: str, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run a phase in a forked child process (fresh heap and RSS high-water mark, no state leaks between phases)."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=_child, args=(variant, kind, args, queue))
    process.start()
    while True:
        try:
            status, payload = queue.get(timeout=1.0)
            break
        except queue_module.Empty:
            if not process.is_alive():
                raise PhaseError(
                    f"{variant} {kind} phase: child process died with exit code {process.exitcode}"
                ) from None
    process.join()
    if status != "ok":
        raise PhaseError(f"{variant} {kind} phase failed in its child process:\n{payload}")
    return payload


def run_round(order: tuple[str, ...], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """One round: CUDA, one in-process phase per trainer; CPU, a timing child then a memory child per trainer."""
    results: dict[str, dict[str, Any]] = {}
    if args.device == "cuda":
        for variant in order:
            results[variant] = run_phase(variant, "both", args)
        return results
    for variant in order:
        results[variant] = run_phase_isolated(variant, "time", args)
    for variant in order:
        results[variant].update(
            {k: v for k, v in run_phase_isolated(variant, "memory", args).items() if k != "losses"}
        )
    return results


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
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8, help="rounds; each runs every phase once per trainer (ABBA)")
    parser.add_argument("--steps", type=int, default=5, help="timed optimizer steps per timing phase")
    parser.add_argument("--warmup", type=int, default=2, help="discarded optimizer steps at the start of a phase")
    parser.add_argument("--memory-steps", type=int, default=3, help="optimizer steps per memory phase (CPU only)")
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
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.memory_steps < 1:
        parser.error("--rounds, --steps and --memory-steps must be >= 1, --warmup >= 0")
    if args.num_generations < 2:
        parser.error("--num-generations must be >= 2")

    print("Update-step overhead: LooGspoTrainer (ours) vs trl.GRPOTrainer (stock: sequence-level ratio, dapo)")
    print(environment(args))
    print(
        f"model: tiny Qwen2 hidden={args.hidden} layers={args.layers}; batch={args.batch_size} "
        f"num_generations={args.num_generations} grad_accum={args.grad_accum} "
        f"completion_length<={args.completion_length}"
    )
    if args.device == "cuda":
        print(
            f"{args.rounds} rounds; per round and trainer one in-process phase of {args.warmup} warm-up + "
            f"{args.steps} timed optimizer steps\n"
            "time   = training_step - generation, median over the phase's timed steps (cuda-synchronized)\n"
            "memory = torch.cuda.max_memory_allocated() - memory_allocated() before train()\n"
        )
    else:
        print(
            f"{args.rounds} rounds; per round and trainer one forked timing phase ({args.warmup} warm-up + "
            f"{args.steps} timed optimizer steps) and one forked memory phase ({args.memory_steps} steps)\n"
            "time   = training_step - generation, median over the timing phase's timed steps\n"
            "memory = peak RSS during train() - RSS before train() (memory phase, glibc mmap threshold 64 KiB)\n"
        )

    header = (
        f"{'round':>5}  {'order':<10}  {'stock ms':>9}  {'ours ms':>9}  {'time x':>7}  "
        f"{'stock MiB':>9}  {'ours MiB':>9}  {'mem x':>7}  {'stock peak':>10}  {'ours peak':>10}"
    )
    print(header)
    print("-" * len(header))
    time_ratios, memory_ratios, peak_ratios = [], [], []
    all_times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    losses: dict[str, list[float]] = {}
    notes: set[str] = set()
    started = time.perf_counter()
    for round_index in range(args.rounds):
        order = VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]
        try:
            results = run_round(order, args)
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
            if args.device == "cpu" and not results[variant]["malloc_tuned"]:
                notes.add("glibc mallopt unavailable: RSS peaks use the default allocator and are noisier")
            if args.device == "cpu" and not results[variant]["hwm_reset"]:
                notes.add("VmHWM could not be reset: peaks are ru_maxrss, including pre-train() memory")
        print(
            f"{round_index:>5}  {','.join(order):<10}  "
            f"{stock['update_s'] * 1e3:>9.1f}  {ours['update_s'] * 1e3:>9.1f}  {time_ratios[-1]:>7.3f}  "
            f"{stock['delta_mib']:>9.1f}  {ours['delta_mib']:>9.1f}  {memory_ratios[-1]:>7.3f}  "
            f"{stock['peak_mib']:>10.1f}  {ours['peak_mib']:>10.1f}",
            flush=True,
        )

    time_ratio = statistics.median(time_ratios)
    memory_ratio = statistics.median(memory_ratios)
    pooled = statistics.median(all_times["ours"]) / statistics.median(all_times["stock"])
    print()
    for note in sorted(notes):
        print(f"note: {note}")
    print(
        f"update time  ours/stock: median of round ratios {time_ratio:.3f} (min {min(time_ratios):.3f}, "
        f"max {max(time_ratios):.3f}; pooled step medians {pooled:.3f})  target <= {TIME_TARGET:.2f}: "
        f"{verdict(time_ratio, TIME_TARGET)}"
    )
    print(
        f"peak memory  ours/stock: median of round ratios {memory_ratio:.3f} (min {min(memory_ratios):.3f}, "
        f"max {max(memory_ratios):.3f}; absolute peaks {statistics.median(peak_ratios):.3f})  "
        f"target <= {MEMORY_TARGET:.2f}: {verdict(memory_ratio, MEMORY_TARGET)}"
    )
    # Sanity check that both trainers saw the same tokens: with the same token denominator, LOO advantages are
    # K/(K-1) times the group-mean ones, so the logged losses should differ by that factor (Adam makes the updates
    # nearly scale-free, so it holds closely after the first step too).
    k = args.num_generations
    loss_ratios = [o / s if s else float("nan") for o, s in zip(losses["ours"], losses["stock"], strict=True)]
    print(
        f"sanity: logged loss ours/stock per step (first round) {[round(r, 3) for r in loss_ratios]}; "
        f"expected ~K/(K-1) = {k / (k - 1):.3f} (LOO vs group-mean advantages over the same tokens)"
    )
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
