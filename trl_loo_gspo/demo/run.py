"""``trl-loo-gspo demo``: train the embedded policy on the embedded task with LooGspoTrainer, offline, on a CPU.

Steps: build or load the warm-started policy (cached), evaluate the held-out pass rate (greedy and sampled), train
with the package's recommended settings on a rollout-token budget, evaluate again, print a before/after table, and
write ``metrics.json`` and ``learning_curve.png`` to the output directory. ``--baseline`` runs stock TRL
``GRPOTrainer`` from the same policy on the same budget and prints both.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from .. import __version__
from ..config import LooGspoConfig
from ..trainer import LooGspoTrainer
from .evaluate import pass_rates
from .policy import PolicySpec, load_or_build_policy
from .task import AdditionTask, addition_reward


@dataclass
class DemoConfig:
    """Settings of one demo run (the CLI's flags)."""

    output_dir: str = "loo-gspo-demo"
    seed: int = 0
    rollout_tokens: int = 700_000
    minutes: float | None = None
    baseline: bool = False
    fresh: bool = False
    cache_dir: str | None = None
    learning_rate: float = 1e-4
    prompts_per_step: int = 32
    num_generations: int = 8
    eval_samples: int = 8
    curve_points: int = 8
    digits: int = 2
    quiet: bool = False
    # Only for tests: shrink the warm start (a tiny budget must still exercise every step of the demo).
    policy_overrides: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.minutes is None and self.rollout_tokens <= 0:
            raise ValueError("the demo needs a budget: rollout_tokens > 0 or minutes > 0")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"minutes must be > 0, got {self.minutes}")


class _BudgetAndCurve(TrainerCallback):
    """Stops at the budget (rollout tokens, or minutes if set); evaluates the validation set along the way.

    Budget progress is ``max(tokens / rollout_tokens, elapsed / minutes)``; the validation pass rate is measured at
    ``curve_points`` evenly spaced fractions of it, and at the end.
    """

    def __init__(self, demo: DemoConfig, validation, tokenizer, progress, task_id):
        self.demo, self.validation, self.tokenizer = demo, validation, tokenizer
        self.progress, self.task_id = progress, task_id
        self.trainer = None
        self.start = time.perf_counter()
        self.curve: list[dict] = []
        self.next_point = 1
        self.last_reward = float("nan")

    def fraction(self, tokens: int) -> float:
        done = tokens / self.demo.rollout_tokens if self.demo.rollout_tokens else 0.0
        if self.demo.minutes is not None:
            done = max(done, (time.perf_counter() - self.start) / (60 * self.demo.minutes))
        return done

    def evaluate(self, model, tokens: int) -> None:
        rates = pass_rates(
            model,
            self.tokenizer,
            self.validation,
            samples=self.demo.eval_samples,
            max_new_tokens=self.demo.digits + 2,
            seed=self.demo.seed,
        )
        self.curve.append({"rollout_tokens": tokens, **rates, "seconds": round(time.perf_counter() - self.start, 1)})

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            self.last_reward = logs["reward"]

    def on_step_end(self, args, state, control, model=None, **kwargs):
        tokens = self.trainer.generated_tokens_total
        done = self.fraction(tokens)
        if done >= 1.0:
            self.evaluate(model, tokens)
            control.should_training_stop = True
        elif done * self.demo.curve_points >= self.next_point:
            self.evaluate(model, tokens)
            self.next_point = int(done * self.demo.curve_points) + 1
        if self.progress is not None:
            self.progress.update(
                self.task_id,
                completed=min(done, 1.0),
                tokens=tokens,
                reward=self.last_reward,
                pass_rate=self.curve[-1]["sampled"] if self.curve else float("nan"),
            )
        return control


def _common_args(demo: DemoConfig, output_dir: Path) -> dict:
    return dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16: several times slower on CPUs without bf16 support
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=demo.seed,
        max_steps=100_000,  # the rollout-token budget stops training
        learning_rate=demo.learning_rate,
        lr_scheduler_type="constant",
        per_device_train_batch_size=demo.prompts_per_step * demo.num_generations,
        num_generations=demo.num_generations,
        max_completion_length=demo.digits + 2,
        temperature=1.0,
        dataloader_num_workers=0,
    )


def recommended_config(demo: DemoConfig, output_dir: Path) -> LooGspoConfig:
    """The package's recommended settings for this task (on-policy: one update per generation round)."""
    return LooGspoConfig(**_common_args(demo, output_dir))


def baseline_config(demo: DemoConfig, output_dir: Path) -> LooGspoConfig:
    """Stock TRL GRPO: TRL's loss and defaults (token-level ratio, dapo loss, group-std scaling) on the same trainer
    (TRL's code computes the loss and the advantages), same budget and batch."""
    return LooGspoConfig.stock_trl(**_common_args(demo, output_dir))


def _train(name, trainer_cls, args, model, tokenizer, train, validation, demo, console):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    trainer = trainer_cls(
        model=model, reward_funcs=[addition_reward], args=args, train_dataset=train, processing_class=tokenizer
    )
    trainer.remove_callback(PrinterCallback)
    columns = [
        TextColumn(f"[bold]{name}"),
        BarColumn(),
        TextColumn("{task.fields[tokens]:,} rollout tokens"),
        TextColumn("reward {task.fields[reward]:.2f}"),
        TextColumn("val pass {task.fields[pass_rate]:.2f}"),
        TimeElapsedColumn(),
    ]
    progress = None if demo.quiet else Progress(*columns, console=console, transient=False)
    task_id = None
    if progress is not None:
        task_id = progress.add_task(name, total=1.0, tokens=0, reward=float("nan"), pass_rate=float("nan"))
    callback = _BudgetAndCurve(demo, validation, tokenizer, progress, task_id)
    callback.trainer = trainer
    trainer.add_callback(callback)
    start = time.perf_counter()
    if progress is not None:
        with progress:
            trainer.train()
    else:
        trainer.train()
    return trainer, callback.curve, time.perf_counter() - start


def run_demo(demo: DemoConfig) -> dict:
    """Run the demo and return its metrics (also written to ``<output_dir>/metrics.json``)."""
    from rich.console import Console

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # transformers' v6 renames (gradient_checkpointing -> activation_checkpointing) are not the user's concern here
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    console = Console(quiet=demo.quiet)
    log = console.print
    total_start = time.perf_counter()
    settings = asdict(demo)
    output_dir = Path(demo.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(demo.seed)

    task = AdditionTask(digits=demo.digits, seed=demo.seed)
    spec = PolicySpec(task=task, seed=demo.seed, **demo.policy_overrides)
    cache_dir = Path(demo.cache_dir) if demo.cache_dir else None
    policy, tokenizer, policy_info = load_or_build_policy(spec, cache_dir, demo.fresh, log)
    train, validation = task.splits()

    def evaluate(model):
        return pass_rates(
            model, tokenizer, validation, samples=demo.eval_samples, max_new_tokens=demo.digits + 2, seed=demo.seed
        )

    before = evaluate(policy)
    log(f"Held-out pass rate before training: greedy {before['greedy']:.3f}, sampled {before['sampled']:.3f}")

    runs = {}
    plans = [("LOO-GSPO", LooGspoTrainer, recommended_config(demo, output_dir / "loo_gspo"))]
    if demo.baseline:
        plans.append(("stock GRPO", LooGspoTrainer, baseline_config(demo, output_dir / "stock_grpo")))
    for name, trainer_cls, args in plans:
        model = copy.deepcopy(policy)
        trainer, curve, seconds = _train(name, trainer_cls, args, model, tokenizer, train, validation, demo, console)
        if demo.minutes is not None:  # the first run's tokens become the token budget of the comparison
            demo = replace(demo, minutes=None, rollout_tokens=trainer.generated_tokens_total)
        after = evaluate(model)
        runs[name] = {
            "before": before,
            "after": after,
            "rollout_tokens": trainer.generated_tokens_total,
            "steps": trainer.state.global_step,
            "train_seconds": round(seconds, 1),
            "curve": [{"rollout_tokens": 0, **before, "seconds": 0.0}, *curve],
            "config": {k: v for k, v in args.to_dict().items() if not k.startswith("_")},
        }

    metrics = {
        "package_version": __version__,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "demo": settings,
        "task": task.settings(),
        "train_size": len(train),
        "validation_size": len(validation),
        "policy": policy_info,
        "runs": runs,
        "total_seconds": round(time.perf_counter() - total_start, 1),
    }
    (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    plot_curves(runs, output_dir / "learning_curve.png")
    table = before_after_table(runs)
    console.print(table)
    log(f"Wrote {output_dir / 'metrics.json'} and {output_dir / 'learning_curve.png'}")
    log(f"Output directory: {output_dir.resolve()}  (total {metrics['total_seconds']:.0f} s)")
    metrics["table"] = table
    return metrics


def before_after_table(runs: dict):
    from rich.table import Table

    table = Table(title="Held-out pass rate (validation split, never trained on)")
    table.add_column("trainer")
    for column in ("greedy", "sampled", "Δ sampled", "rollout tokens", "steps", "train s"):
        table.add_column(column, justify="right")
    for name, run in runs.items():
        b, a = run["before"], run["after"]
        table.add_row(
            name,
            f"{b['greedy']:.3f} → {a['greedy']:.3f}",
            f"{b['sampled']:.3f} → {a['sampled']:.3f}",
            f"{100 * (a['sampled'] - b['sampled']):+.1f} pts",
            f"{run['rollout_tokens']:,}",
            str(run["steps"]),
            f"{run['train_seconds']:.0f}",
        )
    return table


def plot_curves(runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for index, (name, run) in enumerate(runs.items()):
        color = f"C{index}"
        tokens = [p["rollout_tokens"] for p in run["curve"]]
        ax.plot(tokens, [p["sampled"] for p in run["curve"]], color=color, marker="o", label=f"{name}: sampled")
        ax.plot(tokens, [p["greedy"] for p in run["curve"]], color=color, marker=".", ls="--", label=f"{name}: greedy")
    ax.set_xlabel("rollout tokens (generated)")
    ax.set_ylabel("validation pass rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("trl-loo-gspo demo: held-out pass rate vs rollout tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
