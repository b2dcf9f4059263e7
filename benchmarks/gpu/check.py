"""The device check (issue 35): the bf16 / GPU path of ``LooGspoTrainer`` measured in one call.

Usage::

    bash benchmarks/gpu/run.sh                                     # on the GPU machine: wheels, then this script
    python benchmarks/gpu/check.py --device cuda --out DIR         # the same, wheels already importable
    python benchmarks/gpu/check.py --device cpu --tiny --out DIR   # the CPU dry run (CI: tests/test_gpu_check.py)

Sections, each timed and recorded on its own (a failing section is written down and the others still run; the
script exits 1 if any failed):

* ``environment``: torch / CUDA / transformers / TRL / accelerate / peft versions and the device's name.
* ``throughput``: one model built from a config (no weights downloaded): ``--device cuda`` a Qwen2 of Qwen2.5-0.5B's
  shape (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864, vocabulary 151,936, tied; 494M
  parameters) in bf16 weights with ``bf16=True``; ``--tiny`` a 2-layer Qwen2 of hidden 64. Prompts are 32 random
  words of a word-level tokenizer the size of the vocabulary; the reward is 1 for a completion whose CRC-32 is 0 mod
  4 (a pass rate of 1/4, so some groups of 8 are all-wrong and dynamic sampling has something to filter). Three
  trainers, one after the other in this process, each on a fresh model with the same seed, ``generate`` (transformers)
  for sampling: ``stock`` = ``trl.GRPOTrainer`` with ``importance_sampling_level="sequence"``, ``loss_type="dapo"``,
  ``scale_rewards="none"`` (the closest stock setup to ours, as in ``benchmarks/step_overhead.py``); ``ours`` =
  ``LooGspoTrainer`` with its defaults and ``dynamic_sampling=False``; ``ours+ds`` = the same with dynamic sampling.
  All: 8 answers per prompt, 16 rows per micro-batch, 2 micro-batches per optimizer step, a generation round of 4
  micro-batches feeding 2 optimizer steps (``steps_per_generation=4``: TRL's separate old-log-prob pass runs, so the
  first update's ratio noise, ``noise/*``, is a real measurement, not 0 by construction), ε = 3e-4 / 4e-4, TRL's
  gradient checkpointing. Per optimizer step (wall clock, CUDA synchronised): seconds, seconds inside
  ``_generate_and_score_completions`` (generation, rewards, advantages, old log-probs; for ``ours+ds`` every
  sampling round), generated tokens (every sampled token, filtered groups included) and trained tokens (valid tokens
  of the loss). Reported per trainer, over generation rounds (a round's steps summed; the first ``--warmup`` rounds
  discarded; medians over the ``--rounds`` timed rounds): time per optimizer step, generation share, generated and
  trained tokens/s, the peak memory (``torch.cuda.max_memory_allocated``, reset before ``train()``), the groups
  dynamic sampling filtered, and the first updates' ratio noise; then ours / stock ratios.
* ``precision``: ``benchmarks/precision.py`` on this device (CUDA: the 0.5B shape above; ``--tiny``: its tiny set).
* ``tests``: the loss-equality and exact-denominator tests (``tests/test_trainer_loss.py``,
  ``tests/test_trl_loss_types.py``, ``tests/test_step_accounting.py``, ``tests/test_ratio_noise.py``) with their
  trainers on this device (``TRL_LOO_GSPO_TEST_DEVICE``, read by ``tests/helpers.py``); ``--tiny`` runs one of them.

Writes ``gpu-check.json`` (everything), ``gpu-check.md`` (tables) and ``precision.json`` under ``--out``, nothing
else (trainer outputs and pytest's temporary folders go to ``--work``, by default a new temporary folder).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the package from this checkout (the device has no install of it)

import torch  # noqa: E402

SECTIONS = ("environment", "throughput", "precision", "tests")
TRAINERS = ("stock", "ours", "ours+ds")
STEPS_PER_ROUND = 2  # optimizer steps per generation round (steps_per_generation = 2 x gradient_accumulation_steps)
SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab=512),
    "qwen2.5-0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, vocab=151_936
    ),
}
TEST_FILES = (
    "tests/test_trainer_loss.py",
    "tests/test_trl_loss_types.py",
    "tests/test_step_accounting.py",
    "tests/test_ratio_noise.py",
)
TINY_TEST = "tests/test_ratio_noise.py::test_noise_is_zero_when_trl_skips_the_old_pass"


def word_tokenizer(vocab: int):
    """A word-level tokenizer with ``vocab`` entries (``<pad>``, ``<eos>``, ``<unk>``, ``w3`` …), words split on
    spaces and joined with spaces: any sampled id decodes, and the LM head has the real model's width."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, vocab)}
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def build_model(shape: str, tokenizer, dtype: torch.dtype, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    spec = dict(SHAPES[shape])
    config = Qwen2Config(
        vocab_size=spec.pop("vocab"),
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        **spec,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def crc_reward(completions: list, **_: Any) -> list[float]:
    """1 for a completion whose CRC-32 is 0 mod 4, else 0: deterministic, pass rate 1/4."""
    return [float(zlib.crc32(str(text).encode()) % 4 == 0) for text in completions]


def prompts_dataset(vocab: int, rows: int, words: int, seed: int):
    from datasets import Dataset

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, words), generator=generator).tolist()
    return Dataset.from_dict({"prompt": [" ".join(f"w{i}" for i in row) for row in ids]})


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(cls, device: str):
    """``cls`` with per-optimizer-step wall times, generation time and generated / trained token counts."""
    from transformers import TrainerCallback

    from trl_loo_gspo.trainer.rows import loss_mask

    class Clock(TrainerCallback):
        def __init__(self, trainer) -> None:
            self.trainer = trainer

        def on_step_begin(self, args, state, control, **kwargs):
            synchronize(device)
            record = {"start": time.perf_counter(), "generation_s": 0.0, "generated": 0, "trained": 0}
            self.trainer._step_record = record

        def on_step_end(self, args, state, control, **kwargs):
            synchronize(device)
            record = self.trainer._step_record
            record["step_s"] = time.perf_counter() - record.pop("start")
            self.trainer.step_records.append(record)

    class Timed(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.step_records: list[dict[str, float]] = []
            self._step_record: dict[str, float] = {"generation_s": 0.0, "generated": 0, "trained": 0}
            self.add_callback(Clock(self))

        def _generate_and_score_completions(self, inputs):
            synchronize(device)
            start = time.perf_counter()
            before = getattr(self, "generated_tokens_total", None)
            output = super()._generate_and_score_completions(inputs)
            synchronize(device)
            if self.model.training:
                self._step_record["generation_s"] += time.perf_counter() - start
                if before is None:  # stock TRL: every row of the batch was sampled
                    self._step_record["generated"] += int(output["completion_mask"].sum())
                else:  # ours: every sampled token, the filtered rounds of dynamic sampling included
                    self._step_record["generated"] += self.generated_tokens_total - before
            return output

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if self.model.training:
                self._step_record["trained"] += int(loss_mask(inputs).sum())
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    return Timed


def run_trainer(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from trl import GRPOConfig, GRPOTrainer

    from trl_loo_gspo import LooGspoConfig, LooGspoTrainer

    shape = "tiny" if args.tiny else "qwen2.5-0.5b"
    tokenizer = word_tokenizer(SHAPES[shape]["vocab"])
    dtype = torch.bfloat16
    model = build_model(shape, tokenizer, dtype, seed=args.seed)
    steps = (args.warmup + args.rounds) * STEPS_PER_ROUND
    common = dict(
        output_dir=str(Path(args.work) / "runs" / name),
        use_cpu=args.device == "cpu",
        bf16=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
        learning_rate=1e-6,
        max_steps=steps,
        num_generations=8,
        per_device_train_batch_size=16,
        gradient_accumulation_steps=2,
        steps_per_generation=2 * STEPS_PER_ROUND,  # a round feeds two optimizer steps: TRL's old-log-prob pass runs
        max_completion_length=args.completion_length,
        epsilon=3e-4,
        epsilon_high=4e-4,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    if name == "stock":
        config = GRPOConfig(importance_sampling_level="sequence", loss_type="dapo", scale_rewards="none", **common)
        cls = GRPOTrainer
    else:
        config = LooGspoConfig(dynamic_sampling=name == "ours+ds", **common)
        cls = LooGspoTrainer
    rows = 4 * steps * 8  # enough prompts for dynamic sampling's extra rounds
    dataset = prompts_dataset(SHAPES[shape]["vocab"], rows, args.prompt_words, args.seed)
    trainer = timed(cls, args.device)(
        model=model, reward_funcs=[crc_reward], args=config, train_dataset=dataset, processing_class=tokenizer
    )
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - start
    records = trainer.step_records
    rounds = [  # the unit of the figures: one generation round and the optimizer steps it feeds
        {key: sum(r[key] for r in records[i : i + STEPS_PER_ROUND]) for key in records[0]}
        for i in range(0, len(records) - STEPS_PER_ROUND + 1, STEPS_PER_ROUND)
    ][args.warmup :]
    summary = {
        "trainer": name,
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "steps": len(records),
        "timed_rounds": len(rounds),
        "train_s": round(total, 2),
        "step_s": statistics.median(r["step_s"] / STEPS_PER_ROUND for r in rounds),
        "generation_share": statistics.median(r["generation_s"] / r["step_s"] for r in rounds),
        "generated_tokens_per_s": statistics.median(r["generated"] / r["step_s"] for r in rounds),
        "trained_tokens_per_s": statistics.median(r["trained"] / r["step_s"] for r in rounds),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "memory_before_gib": before / 2**30 if cuda else None,
        "step_records": trainer.step_records,
    }
    noise = [e for e in trainer.state.log_history if "noise/answers" in e]
    if noise:
        keys = ("noise/clip_ratio", "noise/out_of_range", "noise/abs_log_ratio/median", "noise/abs_log_ratio/max")
        summary["noise_first_updates"] = [{k: e[k] for k in ("step", *keys)} for e in noise]
    filtered = [e.get("sampling/frac_filtered") for e in trainer.state.log_history]
    summary["frac_groups_filtered"] = [v for v in filtered if v is not None]
    del trainer, model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return summary


def section_environment(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import accelerate
    import peft
    import transformers
    import trl

    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if cuda and args.device.startswith("cuda") else platform.machine(),
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "accelerate": accelerate.__version__,
        "peft": peft.__version__,
        "bf16_supported": bool(cuda and torch.cuda.is_bf16_supported()) if args.device.startswith("cuda") else None,
    }


def section_throughput(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    results = {name: run_trainer(name, args, out) for name in TRAINERS}
    stock = results["stock"]
    ratios = {}
    for name in ("ours", "ours+ds"):
        ours = results[name]
        ratios[name] = {
            "step_s": ours["step_s"] / stock["step_s"],
            "generated_tokens_per_s": ours["generated_tokens_per_s"] / stock["generated_tokens_per_s"],
            "trained_tokens_per_s": ours["trained_tokens_per_s"] / max(stock["trained_tokens_per_s"], 1e-12),
        }
        if stock["peak_memory_gib"]:
            ratios[name]["peak_memory"] = ours["peak_memory_gib"] / stock["peak_memory_gib"]
    return {"trainers": results, "ratios_vs_stock": ratios}


def section_precision(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import precision

    argv = ["--device", args.device, "--json", str(out / "precision.json")]
    if args.tiny:
        argv += ["--tiny", "--lengths", "8", "--answers", "4"]
    else:
        argv += ["--hidden", "896", "--layers", "24", "--heads", "14", "--vocab", "151936"]
    result = precision.main(argv)
    table = precision.format_table(result["rows"])
    return {"command": result["command"], "seconds": result["seconds"], "table": table}


def section_tests(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    targets = [TINY_TEST] if args.tiny else list(TEST_FILES)
    env = dict(os.environ, TRL_LOO_GSPO_TEST_DEVICE="cuda" if args.device.startswith("cuda") else "cpu")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    basetemp = str(Path(args.work) / "pytest")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", basetemp]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, *targets], cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.tests_timeout
    )
    tail = (done.stdout + done.stderr).strip().splitlines()[-40:]
    result = {"targets": targets, "returncode": done.returncode, "seconds": round(time.perf_counter() - start, 1)}
    result["summary"] = tail[-1] if tail else ""
    result["tail"] = tail
    if done.returncode != 0:
        raise RuntimeError(f"pytest exited {done.returncode}: {result['summary']}\n" + "\n".join(tail))
    return result


def markdown(report: dict[str, Any]) -> str:
    lines = [f"$ {report['command']}", ""]
    env = report["sections"].get("environment", {}).get("result")
    if env:
        lines += [", ".join(f"{k} {v}" for k, v in env.items()), ""]
    through = report["sections"].get("throughput", {}).get("result")
    if through:
        lines += [
            "| trainer | step s | generation share | generated tok/s | trained tok/s | peak GiB | groups filtered "
            "| noise out of range | noise max \\|log s\\| |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in through["trainers"].items():
            peak = f"{r['peak_memory_gib']:.2f}" if r["peak_memory_gib"] is not None else "n/a"
            filtered = statistics.mean(r["frac_groups_filtered"]) if r["frac_groups_filtered"] else 0.0
            noise = r.get("noise_first_updates") or []
            out_of_range = f"{max(e['noise/out_of_range'] for e in noise):.3f}" if noise else "n/a (TRL's loss)"
            top = f"{max(e['noise/abs_log_ratio/max'] for e in noise):.2e}" if noise else "n/a"
            lines.append(
                f"| {name} | {r['step_s']:.3f} | {r['generation_share']:.3f} | {r['generated_tokens_per_s']:.0f} | "
                f"{r['trained_tokens_per_s']:.0f} | {peak} | {filtered:.3f} | {out_of_range} | {top} |"
            )
        lines += ["", "ours / stock (medians): " + json.dumps(through["ratios_vs_stock"], indent=None), ""]
    precision_ = report["sections"].get("precision", {}).get("result")
    if precision_:
        lines += [f"$ {precision_['command']}", "", precision_["table"], ""]
    tests = report["sections"].get("tests", {}).get("result")
    if tests:
        lines += [f"tests on {report['device']}: {tests['summary']} ({tests['seconds']} s)", ""]
    for name, section in report["sections"].items():
        lines.append(f"- {name}: {'ok' if section['ok'] else 'FAILED'} in {section['seconds']} s")
        if not section["ok"]:
            lines += ["", "```", section["error"][-3000:], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (the check) or cpu (the dry run)")
    parser.add_argument("--tiny", action="store_true", help="the tiny model and settings of the dry run")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu-check"), help="the 3 result files")
    parser.add_argument("--work", default=None, help="trainer outputs and pytest's basetemp (default: a new temp dir)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--rounds", type=int, default=None, help="timed generation rounds per trainer")
    parser.add_argument("--warmup", type=int, default=1, help="untimed generation rounds per trainer")
    parser.add_argument("--completion-length", type=int, default=None)
    parser.add_argument("--prompt-words", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tests-timeout", type=int, default=300)
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.tiny else 3)
    args.completion_length = args.completion_length or (16 if args.tiny else 256)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device (use --device cpu --tiny for the dry run)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or tempfile.mkdtemp(prefix="gpu-check-")
    command = " ".join(["python", "benchmarks/gpu/check.py", *(sys.argv[1:] if argv is None else argv)])
    report: dict[str, Any] = {"command": command, "device": args.device, "tiny": args.tiny, "sections": {}}
    functions = {
        "environment": section_environment,
        "throughput": section_throughput,
        "precision": section_precision,
        "tests": section_tests,
    }
    for name in args.sections:
        start = time.perf_counter()
        try:
            report["sections"][name] = {"ok": True, "result": functions[name](args, out)}
        except Exception:  # noqa: BLE001 - a failing section is recorded and the others still run
            report["sections"][name] = {"ok": False, "error": traceback.format_exc()}
        report["sections"][name]["seconds"] = round(time.perf_counter() - start, 1)
        print(f"[gpu-check] {name}: {'ok' if report['sections'][name]['ok'] else 'FAILED'} "
              f"({report['sections'][name]['seconds']} s)", flush=True)  # fmt: skip
        (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu-check.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if all(section["ok"] for section in report["sections"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
