"""Generated tokens per valid group and per effective training token, by sampling mode (method §3.1, §5.2).

Runs the real ``LooGspoTrainer`` (its dynamic-sampling code path, not a re-implementation) on a tiny local model
with a *simulated population of prompts*: prompt i has a pass rate p_i drawn from a Beta(a, a) distribution, and
each answer is right with probability p_i (a Bernoulli verifier). ``a`` is chosen so that a given fraction of K=8
groups is degenerate (all right or all wrong). Completions come from a fixed ``rollout_func`` with a constant
length, so tokens count answers. Modes:

* ``none``: no filter (degenerate groups reach the loss with zero weight);
* ``dapo``: DAPO's dynamic sampling (K answers for every prompt, then drop degenerate groups, refill);
* ``probe``: the two-stage probe (k=4 answers first, the other 4 only for prompts whose probe is mixed);
* ``adapt``: the probe plus adaptive group sizes (4 to 16 answers by probe pass rate, same answers per batch).

For each it prints generated tokens per valid group (a group that reached the loss with a comparison signal) and
per effective training token (a token of an answer with a non-zero advantage); 1 generated token per effective
token is the physical limit. Also prints the analytic expectation. Usage::

    python benchmarks/sampling_efficiency.py [--steps 40] [--groups 16] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", category=FutureWarning)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers.trainer_callback import PrinterCallback  # noqa: E402

from trl_loo_gspo import LooGspoConfig, LooGspoTrainer  # noqa: E402
from trl_loo_gspo.demo.tiny import char_tokenizer, tiny_qwen2  # noqa: E402

K = 8
PROBE = 4
LENGTH = 16  # tokens per answer (eos included)


def degenerate_fraction(a: float, k: int) -> float:
    """E[p^k + (1-p)^k] for p ~ Beta(a, a): the chance that a group of k Bernoulli answers is degenerate."""
    log_b = math.lgamma(a + k) + math.lgamma(a) - math.lgamma(2 * a + k) - (2 * math.lgamma(a) - math.lgamma(2 * a))
    return 2 * math.exp(log_b)


def beta_for(target: float, k: int = K) -> float:
    """The a of Beta(a, a) whose degenerate fraction for k answers is ``target`` (bisection on log a)."""
    low, high = 1e-3, 1e3
    for _ in range(200):
        mid = math.sqrt(low * high)
        if degenerate_fraction(mid, k) > target:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high)


def make_population(n: int, a: float, seed: int) -> Dataset:
    rng = random.Random(seed)
    return Dataset.from_list([{"prompt": f"q{i}=", "p": rng.betavariate(a, a)} for i in range(n)])


def make_mixture(n: int, solved: float, seed: int) -> Dataset:
    """Best case for the probe: a fraction ``solved`` of prompts is deterministic (pass rate exactly 0 or 1, half
    each), the rest has pass rates uniform in [0.2, 0.8]. The probe then drops exactly the groups DAPO drops."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        p = rng.choice([0.0, 1.0]) if rng.random() < solved else rng.uniform(0.2, 0.8)
        rows.append({"prompt": f"q{i}=", "p": p})
    return Dataset.from_list(rows)


def mixture_degenerate(solved: float, k: int) -> float:
    moderate = sum(p**k + (1 - p) ** k for p in [0.2 + 0.6 * (i + 0.5) / 1000 for i in range(1000)]) / 1000
    return solved + (1 - solved) * moderate


MODES = {
    "none": {},
    "dapo": {"dynamic_sampling": True},
    "probe": {"dynamic_sampling": True, "probe_generations": PROBE},
    "adapt": {"dynamic_sampling": True, "probe_generations": PROBE, "adaptive_group_size": True},
}


def mode_config(mode: str, out: str, steps: int, groups: int, seed: int, **overrides) -> LooGspoConfig:
    """One sampling mode's config; everything else equal across modes."""
    kwargs = dict(
        output_dir=out,
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=seed,
        max_steps=steps,
        per_device_train_batch_size=groups * K,
        num_generations=K,
        max_sampling_rounds=50,
    )
    kwargs.update(overrides)
    return LooGspoConfig(**kwargs, **MODES[mode])


def train_and_count(trainer: LooGspoTrainer, mode: str, groups: int) -> dict:
    """Train, then generated tokens per valid group and per effective token."""
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    logs = [h for h in trainer.state.log_history if "tokens/generated" in h]
    if mode == "none":
        valid_groups = sum(h["groups/frac_with_signal"] * groups for h in logs)
    else:
        valid_groups = sum(h["sampling/groups"] for h in logs)  # groups with a signal that reached the loss
    generated = trainer.generated_tokens_total
    return {
        "per_group": generated / max(valid_groups, 1e-9),
        "per_effective": generated / max(trainer.effective_tokens_total, 1),
        "degenerate": 1 - sum(h["groups/frac_with_signal"] for h in logs) / len(logs),
        "seconds": seconds,
    }


def run_mode(mode: str, population: Dataset, steps: int, groups: int, seed: int) -> dict:
    tokenizer = char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=32, num_hidden_layers=1, seed=seed)
    answer = tokenizer("7" * (LENGTH - 1), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    rng = random.Random(seed + 1)

    def rollout(prompts, trainer):
        ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return {
            "prompt_ids": ids,
            "completion_ids": [list(answer) for _ in prompts],
            "logprobs": [[0.0] * LENGTH] * len(prompts),
        }

    def bernoulli(completions, p, **_):
        return [float(rng.random() < pi) for pi in p]

    with tempfile.TemporaryDirectory() as out:
        trainer = LooGspoTrainer(
            model=model,
            reward_funcs=[bernoulli],
            args=mode_config(mode, out, steps, groups, seed, max_completion_length=LENGTH, learning_rate=1e-5),
            train_dataset=population,
            processing_class=tokenizer,
            rollout_func=rollout,
        )
        return train_and_count(trainer, mode, groups)


def run_demo_policy(mode: str, steps: int, groups: int, seed: int) -> dict:
    """The same accounting on the real tiny model of ``trl-loo-gspo demo`` (warm-started, cached) and its task."""
    from trl_loo_gspo.demo.policy import PolicySpec, load_or_build_policy
    from trl_loo_gspo.demo.task import AdditionTask, addition_reward

    task = AdditionTask(seed=seed)
    model, tokenizer, _ = load_or_build_policy(PolicySpec(task=task, seed=seed), log=lambda _: None)
    train, _ = task.splits()
    with tempfile.TemporaryDirectory() as out:
        args = mode_config(mode, out, steps, groups, seed, max_completion_length=task.digits + 2, learning_rate=1e-4)
        trainer = LooGspoTrainer(
            model=model, reward_funcs=[addition_reward], args=args, train_dataset=train, processing_class=tokenizer
        )
        return train_and_count(trainer, mode, groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--groups", type=int, default=16, help="groups of K=8 per batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--degenerate", type=float, nargs="*", default=[0.3, 0.4, 0.5, 0.7])
    parser.add_argument("--solved", type=float, nargs="*", default=[0.4, 0.6, 0.8], help="mixture populations")
    parser.add_argument("--demo-steps", type=int, default=30, help="steps on the demo's tiny model (0 = skip)")
    cli = parser.parse_args()
    torch.set_num_threads(1)

    print(f"K={K}, probe k={PROBE}, {LENGTH} tokens per answer, {cli.groups} groups per batch, {cli.steps} steps")
    header = (
        f"{'degenerate':>10} {'mode':>6} {'gen tok/valid group':>20} {'expected':>9} {'gen/effective':>14}"
        f" {'vs dapo':>8} {'seconds':>8}"
    )
    print(header)
    print("-" * len(header))
    populations = []
    for target in cli.degenerate:
        a = beta_for(target)
        d_full, d_probe = degenerate_fraction(a, K), degenerate_fraction(a, PROBE)
        populations.append((f"Beta({a:.3f}, {a:.3f})", make_population(4000, a, cli.seed), d_full, d_probe))
    for solved in cli.solved:
        d_full, d_probe = mixture_degenerate(solved, K), mixture_degenerate(solved, PROBE)
        name = f"{solved:.0%} deterministic + U(0.2, 0.8)"
        populations.append((name, make_mixture(4000, solved, cli.seed), d_full, d_probe))
    for name, population, d_full, d_probe in populations:
        # analytic generated answers per valid group (equal-length answers)
        expected = {"none": K / (1 - d_full), "dapo": K / (1 - d_full), "probe": PROBE / (1 - d_probe) + K - PROBE}
        expected["adapt"] = math.nan  # group sizes vary: compare per effective token
        results = {mode: run_mode(mode, population, cli.steps, cli.groups, cli.seed) for mode in expected}
        for mode, r in results.items():
            ratio = r["per_group"] / results["dapo"]["per_group"]
            print(
                f"{d_full:>10.0%} {mode:>6} {r['per_group']:>20.1f} {expected[mode] * LENGTH:>9.1f}"
                f" {r['per_effective']:>14.2f} {ratio:>8.2f} {r['seconds']:>8.1f}"
            )
        print(f"{'':>10} {name}: degenerate with 4 answers {d_probe:.0%}, with 8 {d_full:.0%}")

    if cli.demo_steps:
        print(f"\nThe demo's warm-started tiny model on its addition task ({cli.demo_steps} steps, real sampling):")
        demo = {
            mode: run_demo_policy(mode, cli.demo_steps, cli.groups, cli.seed)
            for mode in ("none", "dapo", "probe", "adapt")
        }
        for mode, r in demo.items():
            ratio = r["per_group"] / demo["dapo"]["per_group"]
            print(
                f"{demo['none']['degenerate']:>10.0%} {mode:>6} {r['per_group']:>20.1f} {'':>9}"
                f" {r['per_effective']:>14.2f} {ratio:>8.2f} {r['seconds']:>8.1f}"
            )


if __name__ == "__main__":
    main()
