"""Before any ablation: what the mixed sum task gives each component to act on, at the warm-started policy.

For each seed, builds (or loads from the cache) the warm-started policy of ``demo-mixed`` exactly as
``trl-loo-gspo ablate`` does, samples K answers per problem for the first N training problems as training samples
them (temperature 1, top-k and top-p off), and reports the fraction of degenerate groups (all right or all wrong:
what dynamic sampling filters), per number of terms, and the spread of answer lengths in tokens (what token-total
aggregation weights by), and the fraction of answers at the generation limit. The same for the validation split
to show it has the same mix — or, when the task holds a tuning split, for the tuning split instead (the validation
split is then not looked at: every choice is made on tuning). ``--options`` sets the task's fields as a plan's
``task_options`` does, ``--policy`` the warm start as a plan's ``policy`` does (e.g. the chained-addition task of
``recipes/ablations/chain-study.yaml``). Usage::

    python benchmarks/mixed_task_profile.py [--seeds 0 1 2 3 4] [--problems 512] [--k 8] [--json OUT.json]
        [--options '{"min_terms": 2, "max_terms": 4, "max_operand": 99}'] [--policy '{"target_pass_rate": 0.5}']
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

warnings.filterwarnings("ignore", category=FutureWarning)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from trl_loo_gspo.demo.evaluate import sample_groups  # noqa: E402
from trl_loo_gspo.demo.mixed import MixedSumTask, group_profile  # noqa: E402
from trl_loo_gspo.demo.policy import PolicySpec, load_or_build_policy  # noqa: E402


def profile_seed(
    seed: int,
    problems: int,
    k: int,
    options: dict | None = None,
    split_seed: int | None = None,
    policy: dict | None = None,
) -> dict:
    task = MixedSumTask(**{**(options or {}), "seed": seed if split_seed is None else split_seed})
    start = time.perf_counter()
    spec = PolicySpec(task=task, seed=seed, **(policy or {}))
    model, tokenizer, info = load_or_build_policy(spec, log=lambda _: None)
    built = time.perf_counter() - start
    out = {
        "seed": seed,
        "policy_key": info["key"],
        "warm_start_steps": info.get("sft_steps"),
        "load_s": round(built, 1),
    }
    train, validation = task.splits()
    # with a tuning split, the validation split is not looked at (every choice is made on tuning: issue #32)
    splits = {
        "train": train,
        **({"tuning": task.tuning_split()} if task.has_tuning_split else {"validation": validation}),
    }
    for name, split in splits.items():
        rows = split.select(range(min(problems, len(split))))
        scores, lengths = sample_groups(model, tokenizer, rows, k, task.max_new_tokens, task.score, seed=seed)
        out[name] = group_profile(scores, lengths, list(rows["terms"]), task.max_new_tokens)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--problems", type=int, default=512)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--json", default=None, help="also write the profiles here")
    parser.add_argument("--options", default="{}", help="the task's fields as JSON (a plan's task_options)")
    parser.add_argument("--policy", default="{}", help="PolicySpec overrides as JSON (a plan's policy)")
    parser.add_argument(
        "--split-seed", type=int, default=None, help="one data split for every seed (a plan's split_seed)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    profiles = []
    for seed in args.seeds:
        p = profile_seed(
            seed, args.problems, args.k, json.loads(args.options), args.split_seed, json.loads(args.policy)
        )
        profiles.append(p)
        tr = p["train"]
        held_name = "tuning" if "tuning" in p else "validation"
        per = "  ".join(
            f"{t} terms: degenerate {v['degenerate']:.2f}, pass {v['pass_rate']:.2f}, {v['mean_length_tokens']:.1f} t"
            for t, v in tr["per_label"].items()
        )
        print(
            f"seed {seed} (warm start {p['warm_start_steps']} steps): train degenerate {tr['degenerate']:.3f} "
            f"(all right {tr['all_right']:.3f}, all wrong {tr['all_wrong']:.3f}); {held_name} degenerate "
            f"{p[held_name]['degenerate']:.3f}; answer length p10/p50/p90 {tr['length_tokens']['p10']:.0f}/"
            f"{tr['length_tokens']['p50']:.0f}/{tr['length_tokens']['p90']:.0f} tokens "
            f"(p90/p10 {tr['length_p90_over_p10']:.1f}, range {tr['length_min_max']}, at the limit "
            f"{tr['at_length_limit']:.3f})\n    {per}",
            flush=True,
        )
    mean = sum(p["train"]["degenerate"] for p in profiles) / len(profiles)
    print(f"mean starting degenerate fraction (train, K={args.k}): {mean:.3f} over {len(profiles)} seeds")
    if args.json:
        with open(args.json, "w") as handle:
            record = {"k": args.k, "problems": args.problems, "options": json.loads(args.options)}
            record["policy"] = json.loads(args.policy)
            json.dump({**record, "split_seed": args.split_seed, "profiles": profiles}, handle, indent=2)


if __name__ == "__main__":
    main()
