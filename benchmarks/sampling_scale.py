"""What dynamic sampling costs at cluster scale, per optimizer step, against plain TRL without filtering.

Two real CPU processes (gloo, ``torch.distributed.run``), the real trainers, a tiny local model and a simulated
population of prompts (pass rate p_i ~ Beta(a, a), with ``a`` chosen so that ``--degenerate`` of the groups of K
answers are all right or all wrong; a Bernoulli verifier; answers of seeded-random length from a ``rollout_func``,
so no model generation is timed). Measured on every rank, per optimizer step:

* **generate calls**: calls of the rollout function that generate answers;
* **bytes gathered**: payload received through ``torch.distributed`` collectives (``all_gather_object``: the
  pickled objects of every rank; ``all_gather`` / ``all_gather_into_tensor`` / ``all_reduce``: tensor bytes times
  the world size for gathers);
* **peak host memory**: the process's peak RSS (``ru_maxrss``) at the end;
* **sampling wall time**: time inside ``_generate_and_score_completions`` (rounds, scoring, TRL's batch pass).

Modes: ``plain`` (stock ``trl.GRPOTrainer``, no filtering), ``dapo`` (``dynamic_sampling``), ``probe``
(``probe_generations=K/2``), ``adapt`` (probe + ``adaptive_group_size``). Ratios are ours / plain, medians over
steps. Usage (from the repository root)::

    python benchmarks/sampling_scale.py [--steps 6] [--groups 8] [--degenerate 0.6]

The script launches its two workers itself (``python -m torch.distributed.run --nproc_per_node 2``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

K = 8
MODES = {
    "plain": None,
    "dapo": {"dynamic_sampling": True},
    "probe": {"dynamic_sampling": True, "probe_generations": K // 2},
    "adapt": {"dynamic_sampling": True, "probe_generations": K // 2, "adaptive_group_size": True},
}


class Meter:
    """Per-step counters, filled by the patched collectives and the rollout function."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0
        self.sampling = 0.0
        self.steps: list[dict] = []

    def close_step(self) -> None:
        self.steps.append({"calls": self.calls, "bytes": self.bytes, "sampling_s": self.sampling})
        self.calls, self.bytes, self.sampling = 0, 0, 0.0


def patch_collectives(meter: Meter) -> None:
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    original_object, original_gather = dist.all_gather_object, dist.all_gather
    original_into, original_reduce = dist.all_gather_into_tensor, dist.all_reduce

    def all_gather_object(output, obj, group=None):
        meter.bytes += len(pickle.dumps(obj)) * world
        return original_object(output, obj, group=group)

    def all_gather(tensor_list, tensor, *args, **kwargs):
        meter.bytes += tensor.numel() * tensor.element_size() * world
        return original_gather(tensor_list, tensor, *args, **kwargs)

    def all_gather_into_tensor(output, tensor, *args, **kwargs):
        meter.bytes += tensor.numel() * tensor.element_size() * world
        return original_into(output, tensor, *args, **kwargs)

    def all_reduce(tensor, *args, **kwargs):
        if isinstance(tensor, torch.Tensor) and not tensor.requires_grad and tensor.numel() < 4096:
            meter.bytes += tensor.numel() * tensor.element_size()  # metric reductions (gradients are not counted)
        return original_reduce(tensor, *args, **kwargs)

    dist.all_gather_object, dist.all_gather = all_gather_object, all_gather
    dist.all_gather_into_tensor, dist.all_reduce = all_gather_into_tensor, all_reduce


def worker(cli: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_loo_gspo import LooGspoConfig, LooGspoTrainer
    from trl_loo_gspo.demo.tiny import char_tokenizer, tiny_qwen2

    sys.path.insert(0, str(Path(__file__).parent))
    from sampling_efficiency import beta_for  # the same population model

    torch.set_num_threads(1)
    meter = Meter()
    a = beta_for(cli.degenerate, K)
    rng = random.Random(cli.seed)
    population = Dataset.from_list([{"prompt": f"q{i}=", "p": rng.betavariate(a, a)} for i in range(4000)])
    tokenizer = char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=32, num_hidden_layers=1, seed=cli.seed)
    rank = int(os.environ["RANK"])
    answers = random.Random(cli.seed + 100 + rank)
    verdicts = random.Random(cli.seed + 200 + rank)

    def rollout(prompts, trainer):
        meter.calls += 1
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for prompt in prompts:
            length = answers.randint(cli.length // 4, cli.length)
            ids = [tokenizer.convert_tokens_to_ids("7")] * (length - 1) + [tokenizer.eos_token_id]
            out["prompt_ids"].append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            out["completion_ids"].append(ids)
            out["logprobs"].append([0.0] * length)
        return out

    def bernoulli(completions, p, **_):
        return [float(verdicts.random() < pi) for pi in p]

    common = dict(
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=cli.seed,
        max_steps=cli.steps,
        per_device_train_batch_size=cli.groups * K // 2,
        num_generations=K,
        max_completion_length=cli.length,
        learning_rate=1e-5,
        ddp_find_unused_parameters=False,
    )
    settings = MODES[cli.mode]
    out = tempfile.mkdtemp()
    if settings is None:
        cls, args = GRPOTrainer, GRPOConfig(output_dir=out, **common)
    else:
        cls, args = (
            LooGspoTrainer,
            LooGspoConfig(
                output_dir=out,
                max_sampling_rounds=20,
                summary_table=False,
                register_experiment=False,
                **common,
                **settings,
            ),
        )

    class Timed(cls):
        def _generate_and_score_completions(self, inputs):
            start = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                meter.sampling += time.perf_counter() - start

    class StepEnd(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            meter.close_step()

    trainer = Timed(
        model=model,
        reward_funcs=[bernoulli],
        args=args,
        train_dataset=population,
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(StepEnd())
    patch_collectives(meter)
    trainer.train()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rounds = [h["sampling/rounds"] for h in trainer.state.log_history if "sampling/rounds" in h]
    result = {"steps": meter.steps, "peak_mib": peak_mib, "rounds": rounds}
    Path(cli.out).with_suffix(f".rank{rank}.json").write_text(json.dumps(result))


def launch(mode: str, cli: argparse.Namespace, out: Path) -> list[dict]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(29500 + random.randint(0, 2000)),
        __file__,
        "--worker",
        "--mode",
        mode,
        "--out",
        str(out),
        "--steps",
        str(cli.steps),
        "--groups",
        str(cli.groups),
        "--degenerate",
        str(cli.degenerate),
        "--length",
        str(cli.length),
        "--seed",
        str(cli.seed),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return [json.loads(out.with_suffix(f".rank{r}.json").read_text()) for r in range(2)]


def summarise(ranks: list[dict], skip: int) -> dict:
    steps = [s for s in zip(*(r["steps"] for r in ranks), strict=True)][skip:]
    rounds = [x for x in ranks[0]["rounds"][skip:]] or [1]
    return {
        "calls": statistics.median(max(s["calls"] for s in step) for step in steps),
        "bytes": statistics.median(max(s["bytes"] for s in step) for step in steps),
        "sampling_s": statistics.median(max(s["sampling_s"] for s in step) for step in steps),
        "peak_mib": max(r["peak_mib"] for r in ranks),
        "rounds": statistics.median(rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=8, help="groups of K=8 per generation batch (both ranks)")
    parser.add_argument("--degenerate", type=float, default=0.6, help="fraction of degenerate groups of K answers")
    parser.add_argument("--length", type=int, default=32, help="max answer length (tokens)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.worker:
        worker(cli)
        return
    print(
        f"2 gloo processes, K={K}, {cli.groups} groups per batch, {cli.degenerate:.0%} degenerate groups, "
        f"answers <= {cli.length} tokens, {cli.steps} steps (first discarded); medians per optimizer step, max "
        "over ranks"
    )
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            rows[mode] = summarise(launch(mode, cli, Path(tmp) / mode), skip=1)
    plain = rows["plain"]
    header = (
        f"{'mode':>6} {'rounds':>6} {'gen calls':>9} {'x':>6} {'gathered KiB':>12} {'x':>6} "
        f"{'peak MiB':>9} {'x':>6} {'sampling s':>10} {'x':>6} {'calls/round':>11} {'KiB/round x':>11}"
    )
    print(header)
    print("-" * len(header))
    for mode, r in rows.items():

        def ratio(key, r=r):
            return r[key] / plain[key] if plain[key] else math.nan

        print(
            f"{mode:>6} {r['rounds']:>6.1f} {r['calls']:>9.1f} {ratio('calls'):>6.2f} {r['bytes'] / 1024:>12.1f} "
            f"{ratio('bytes'):>6.2f} {r['peak_mib']:>9.1f} {ratio('peak_mib'):>6.3f} {r['sampling_s']:>10.3f} "
            f"{ratio('sampling_s'):>6.2f} {r['calls'] / r['rounds']:>11.2f} {ratio('bytes') / r['rounds']:>11.2f}"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
