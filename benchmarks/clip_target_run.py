"""The clip-range controller in a real run (issue 43): ``clip_target_fraction`` against GSPO's fixed ε on the chain
study's task, one sweep seed, tuning split only.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/clip_target_run.py [--out outputs/clip-target] [--seed 100] \
        [--target 0.15] [--lr 2e-4] [--replot]

Both arms are the ``full`` variant of ``recipes/ablations/chain-study.yaml`` (LOO, token-total aggregation, dynamic
sampling; its config from the plan, loaded with the package's plan loader) built and trained by the ablation
runner's own helpers (``_build_demo_run``, ``_train_to_budget``) exactly as a sweep run on the tuning split: the
seed's warm-started policy (built on first use, then cached), 32 prompts x 8 answers per round, 4 optimizer steps of
64 answers per round, the plan's budget of 120,000 generated tokens, scored at the start and the end on the tuning
split (never on validation). Learning rate 2e-4: the rate the chain study's sweep chose for ``full``
(docs/results/chain-study-2/report.md). Arms: ``target-15%`` (``clip_target_fraction=0.15``, starting from GSPO's
ε 3e-4 / 4e-4) and ``fixed`` (GSPO's ε 3e-4 / 4e-4, as the study ran it); the same seed and warm start.

Writes to ``--out``: ``target-15.json`` and ``fixed.json`` (the per-step rows from the trainer's log history, the
run's clip tally ``trainer.clip_control.summary()``, the runner's record with the final tuning pass rates, the wall
time, the provenance), ``tables.md`` (the per-position and per-round tables) and ``clip_target.png``. ``--replot``
rebuilds the last two from the JSON files without training.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "recipes" / "ablations" / "chain-study.yaml"
VARIANT = "full"
POSITIONS = (1, 2, 3)
#: log_history key -> per-step row field
STEP_KEYS = {
    "clip/round_position": "position",
    "clip/offpolicy_fraction": "offpolicy_fraction",
    "clip/offpolicy_answers": "offpolicy_answers",
    "clip/upper_fraction": "upper_fraction",
    "clip/lower_fraction": "lower_fraction",
    "clip/gradient_answers": "gradient_answers",
    "clip/answers": "answers",
    "ratio/abs_log/p50": "abs_log_p50",
    "ratio/abs_log/p90": "abs_log_p90",
    "ratio/abs_log/p99": "abs_log_p99",
    "clip/offpolicy_abs_log_p50": "offpolicy_abs_log_p50",
    "clip/offpolicy_abs_log_p90": "offpolicy_abs_log_p90",
    "clip/measured_fraction": "measured_fraction",
    "clip/epsilon_estimate": "epsilon_estimate",
    "clip/epsilon_low": "epsilon_low_next",
    "clip/epsilon_high": "epsilon_high_next",
}


def arm_slug(target: float | None) -> str:
    return "fixed" if target is None else f"target-{target:.0%}"


def arm_file(arm: str) -> str:
    """The arm's file and folder name (no ``%``: the name stays a plain path and URL)."""
    return arm.replace("%", "")


def _clean(value: Any) -> Any:
    """JSON without NaN: NaN and infinities become ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def step_rows(log_history: list[dict[str, Any]], epsilon_low: float, epsilon_high: float) -> list[dict[str, Any]]:
    """One row per optimizer step (``logging_steps=1``). ``round``: index of the generation round the step trains on
    (0-based, in order of generation; the round was generated at optimizer step ``step - 1 - position``);
    ``epsilon_*_in_force``: the range the step trained with (the previous step's logged ``clip/epsilon_*``, which
    is the range of the next step; the starting range for the first step)."""
    rows = []
    low, high = epsilon_low, epsilon_high
    for entry in log_history:
        if "loss" not in entry or "clip/round_position" not in entry:
            continue
        row: dict[str, Any] = {"step": int(entry["step"])}
        row.update({field: entry[key] for key, field in STEP_KEYS.items() if key in entry})
        row["position"] = int(round(row["position"]))
        row["generated_at_step"] = row["step"] - 1 - row["position"]
        row["epsilon_low_in_force"], row["epsilon_high_in_force"] = low, high
        row["by_length"] = {b: entry.get(f"clip/by_length/{b}") for b in ("short", "mid", "long")}
        low, high = row.get("epsilon_low_next", low), row.get("epsilon_high_next", high)
        rows.append(row)
    starts = sorted({row["generated_at_step"] for row in rows})
    index = {start: i for i, start in enumerate(starts)}
    for row in rows:
        row["round"] = index[row["generated_at_step"]]
    return rows


def run_arm(plan: Any, target: float | None, lr: float, seed: int, out: Path) -> dict[str, Any]:
    """Train one arm as the ablation runner trains a sweep run on the tuning split, plus the overrides."""
    from trl_loo_gspo.experiment.ablation.provenance import run_provenance
    from trl_loo_gspo.experiment.ablation.runner import _build_demo_run, _train_to_budget
    from trl_loo_gspo.experiment.ablation.sweep import sweep_budget

    arm = arm_slug(target)
    overrides = {**plan.variant_config(VARIANT), "learning_rate": lr, "logging_steps": 1}
    if target is not None:
        overrides["clip_target_fraction"] = target
    split = "tuning"
    # as the runner's records carry it (commit, hash of the package source as imported, libraries, run config)
    provenance = run_provenance(plan, VARIANT, overrides, False, seed, split)
    trainer, validation_cb, verifier, extra = _build_demo_run(
        plan, VARIANT, overrides, False, seed, split, str(out / arm_file(arm) / "trainer")
    )
    start_low, start_high = trainer.clip_control.start_low, trainer.clip_control.start_high
    budget = sweep_budget(plan)
    start = time.perf_counter()
    record = _train_to_budget(budget, trainer, validation_cb, verifier, VARIANT, overrides, False, seed, None, extra)
    seconds = time.perf_counter() - start  # training and the two tuning-split evaluations
    record.pop("process_log", None)
    history = validation_cb.history
    return _clean(
        {
            "arm": arm,
            "variant": VARIANT,
            "seed": seed,
            "learning_rate": lr,
            "target_fraction": target,
            "budget_tokens": budget,
            "split": split,
            "epsilon_start": [start_low, start_high],
            "controller": {
                key: getattr(trainer.args, key)
                for key in (
                    "clip_controller_max_step",
                    "clip_controller_ema",
                    "clip_epsilon_bounds",
                )
            },
            "seconds": round(seconds, 1),
            "train_seconds": record["seconds"],
            "final_sampled_pass_rate": history[-1]["eval/pass_rate"],
            "final_greedy_pass_at_1": history[-1]["eval/pass_at_1"],
            "start_sampled_pass_rate": history[0]["eval/pass_rate"],
            "start_greedy_pass_at_1": history[0]["eval/pass_at_1"],
            "clip_summary": trainer.clip_control.summary(),
            "steps": step_rows(trainer.state.log_history, start_low, start_high),
            "record": record,
            "provenance": provenance,
        }
    )


# ------------------------------------------------------------------------------------------------ tables, plot
def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def settled_epsilon(result: dict[str, Any]) -> dict[str, float]:
    """ε_low in force over the last third of the steps (median, min, max) and the final range."""
    steps = result["steps"]
    tail = [row["epsilon_low_in_force"] for row in steps[len(steps) - len(steps) // 3 :]]
    summary = result["clip_summary"]
    return {
        "tail_steps": len(tail),
        "tail_median": statistics.median(tail),
        "tail_min": min(tail),
        "tail_max": max(tail),
        "final_low": summary["epsilon_low"],
        "final_high": summary["epsilon_high"],
    }


def settled_round(result: dict[str, Any]) -> int | None:
    """The first round trained entirely after the controller's climb from the starting range: the round after the
    one in which it first moved ε by less than its largest step; ``None`` without a controller."""
    if result["target_fraction"] is None:
        return None
    max_step = result["controller"]["clip_controller_max_step"]
    for row in result["steps"]:
        move = abs(math.log(row["epsilon_low_next"] / row["epsilon_low_in_force"]))
        if row["position"] >= 1 and move < max_step - 1e-9:
            return row["round"] + 1
    return None


def pooled(rows: list[dict[str, Any]], position: int | None = None) -> tuple[float | None, int]:
    """Clipped fraction of the off-policy answers with Â ≠ 0 pooled over ``rows`` (answer-weighted), and the count."""
    rows = [r for r in rows if r.get("offpolicy_fraction") is not None and position in (None, r["position"])]
    answers = sum(r["offpolicy_answers"] for r in rows)
    clipped = sum(r["offpolicy_fraction"] * r["offpolicy_answers"] for r in rows)
    return (clipped / answers if answers else None), int(answers)


def tables(results: list[dict[str, Any]]) -> str:
    lines = [
        "| arm | steps | " + " | ".join(f"position {p}" for p in POSITIONS) + " | off-policy pooled | "
        "|log s| p50 / p90 (off-policy) | gradient answers | sampled pass rate | greedy pass@1 | seconds |",
        "|---|---|" + "---|" * len(POSITIONS) + "---|---|---|---|---|---|",
    ]
    for r in results:
        summary = r["clip_summary"]
        by_position = summary["by_position"]
        cells = []
        for p in POSITIONS:
            figures = by_position.get(str(p))
            cells.append("—" if figures is None else f"{_pct(figures['clipped_fraction'])} ({figures['steps']})")
        off = summary["offpolicy"]
        lines.append(
            f"| {r['arm']} | {len(r['steps'])} | " + " | ".join(cells) + f" | {_pct(off['clipped_fraction'])} | "
            f"{off['abs_log_ratio_p50']:.2e} / {off['abs_log_ratio_p90']:.2e} | "
            f"{summary['all']['gradient_answers']:,} of {summary['all']['answers']:,} | "
            f"{r['start_sampled_pass_rate']:.3f} → {r['final_sampled_pass_rate']:.3f} | "
            f"{r['start_greedy_pass_at_1']:.3f} → {r['final_greedy_pass_at_1']:.3f} | {r['seconds']} |"
        )
    lines.append("")
    lines.append("Cells: clipped fraction of the off-policy answers with Â ≠ 0 at that position (its steps).")
    start = next((settled_round(r) for r in results if settled_round(r) is not None), None)
    if start is not None:
        lines += [
            "",
            f"From round {start} on (the first round trained entirely after the controller's climb from the starting "
            "ε; the same rounds in both arms), pooled from the per-step rows (answer-weighted):",
            "",
            "| arm | rounds | " + " | ".join(f"position {p}" for p in POSITIONS) + " | off-policy pooled |",
            "|---|---|" + "---|" * (len(POSITIONS) + 1),
        ]
        for r in results:
            rows = [row for row in r["steps"] if row["round"] >= start]
            cells = [pooled(rows, p) for p in POSITIONS] + [pooled(rows)]
            text = " | ".join(f"{_pct(f)} (of {n})" for f, n in cells)
            lines.append(f"| {r['arm']} | {start}–{rows[-1]['round']} | {text} |")
    for r in results:
        lines += ["", f"### {r['arm']}: per round", ""]
        lines.append(
            "| round | steps | "
            + " | ".join(f"clipped, position {p}" for p in POSITIONS)
            + " | ε_low in force (positions 1 / 2 / 3) |"
        )
        lines.append("|---|---|" + "---|" * len(POSITIONS) + "---|")
        rounds: dict[int, list[dict[str, Any]]] = {}
        for row in r["steps"]:
            rounds.setdefault(row["round"], []).append(row)
        for index, rows in sorted(rounds.items()):
            at = {row["position"]: row for row in rows}
            fractions = [_pct(at[p].get("offpolicy_fraction")) if p in at else "—" for p in POSITIONS]
            epsilons = [f"{at[p]['epsilon_low_in_force']:.3g}" if p in at else "—" for p in POSITIONS]
            span = f"{rows[0]['step']}–{rows[-1]['step']}"
            lines.append(f"| {index} | {span} | " + " | ".join(fractions) + " | " + " / ".join(epsilons) + " |")
        eps = settled_epsilon(r)
        lines += [
            "",
            f"ε_low in force over the last {eps['tail_steps']} steps: median {eps['tail_median']:.3g} (range "
            f"{eps['tail_min']:.3g}–{eps['tail_max']:.3g}); after the last step: ε_low {eps['final_low']:.3g}, "
            f"ε_high {eps['final_high']:.3g}.",
        ]
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], target: float | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {1: "tab:blue", 2: "tab:orange", 3: "tab:red"}
    markers = {"fixed": "x"}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for r in results:
        marker = markers.get(r["arm"], "o")
        for p in POSITIONS:
            rows = [row for row in r["steps"] if row["position"] == p and row.get("offpolicy_fraction") is not None]
            top.scatter(
                [row["step"] for row in rows],
                [row["offpolicy_fraction"] for row in rows],
                color=colors[p],
                marker=marker,
                s=22,
                alpha=0.85,
                facecolors="none" if marker == "o" else None,
                label=f"{r['arm']}, position {p}",
            )
        bottom.step(
            [row["step"] for row in r["steps"]],
            [row["epsilon_low_in_force"] for row in r["steps"]],
            where="mid",
            label=r["arm"],
            color="black" if r["arm"] == "fixed" else "tab:green",
        )
    if target is not None:
        top.axhline(target, linestyle="--", color="gray", label=f"target {target:.0%}")
    top.set_ylabel("clipped fraction of off-policy\nanswers with Â ≠ 0")
    top.set_ylim(-0.02, 1.02)
    top.legend(fontsize=7, ncol=2, loc="upper right")
    top.set_title(f"chain study, full variant, seed {results[0]['seed']}, tuning split: clip target vs GSPO's fixed ε")
    bottom.set_yscale("log")
    bottom.set_ylabel("ε_low in force")
    bottom.set_xlabel("optimizer step")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="outputs/clip-target")
    parser.add_argument("--seed", type=int, default=100, help="a sweep seed, not a study seed")
    parser.add_argument("--target", type=float, default=0.15, help="clip_target_fraction of the target arm")
    parser.add_argument("--lr", type=float, default=2e-4, help="full's rate in the chain study's sweep")
    parser.add_argument("--replot", action="store_true", help="rebuild tables.md and the plot from the JSON files")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = [args.target, None]
    if args.replot:
        results = [json.loads((out / f"{arm_file(arm_slug(t))}.json").read_text()) for t in arms]
    else:
        from trl_loo_gspo.experiment.ablation.plan import AblationPlan

        torch.set_num_threads(1)
        plan = AblationPlan.from_yaml(PLAN)
        command = "python benchmarks/clip_target_run.py " + " ".join(sys.argv[1:] if argv is None else argv)
        results = []
        for target in arms:
            result = run_arm(plan, target, args.lr, args.seed, out)
            result["command"] = command.strip()
            result["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, 1 thread"
            (out / f"{arm_file(result['arm'])}.json").write_text(json.dumps(result, indent=1))
            print(f"{result['arm']}: {len(result['steps'])} steps, {result['seconds']} s", flush=True)
            results.append(result)
    text = tables(results)
    (out / "tables.md").write_text(text)
    plot(results, args.target, out / "clip_target.png")
    print(text)
    return results


if __name__ == "__main__":
    main()
