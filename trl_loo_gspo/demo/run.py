"""``trl-loo-gspo demo``: train the embedded policy on the embedded task with LooGspoTrainer, offline, on a CPU.

Steps: build or load the warm-started policy (cached), evaluate the held-out pass rate (greedy and sampled), train
with the package's recommended settings on a rollout-token budget, evaluate again, print a before/after table, and
write ``metrics.json`` and ``learning_curve.png`` to the output directory. ``--baseline`` runs stock TRL
``GRPOTrainer`` from the same policy on the same budget and prints both.

On an interactive terminal training shows a progress bar; in a log file or a pipe it prints one plain line per
validation point instead (no redraws). Ctrl-C during training stops it cleanly and writes the partial results
(see :func:`run_demo`).
"""

from __future__ import annotations

import copy
import json
import os
import platform
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from .. import __version__
from ..config import LooGspoConfig
from ..trainer import LooGspoTrainer
from ..trainer.budget import RolloutTokenBudget
from ..trainer.reporting import SummaryTable, summary_rows, summary_table
from .config import DemoConfig, prepare_output_dir
from .display import Display, Status, make_console, make_display
from .evaluate import pass_rates
from .interrupt import CtrlC, StopOnCtrlC
from .policy import PolicySpec, load_or_build_policy
from .task import AdditionTask, addition_reward

#: The CLI's exit status after Ctrl-C (128 + SIGINT, as a shell reports a process killed by Ctrl-C).
EXIT_INTERRUPTED = 130


class _BudgetAndCurve(TrainerCallback):
    """Stops at the budget (the trainer's run plan for rollout tokens, or minutes if set); evaluates the validation
    set along the way.

    Budget progress is ``max(tokens / budget, elapsed / minutes)``, the token budget read from ``trainer.run_plan``
    (the one the sampling rounds stop at: ``_train`` gives the run ``rollout_tokens`` as a ``RolloutTokenBudget``);
    the validation pass rate is measured at ``curve_points`` evenly spaced fractions of it, and at the end. The
    display is updated on each step's log (when the step's reward is known).
    """

    def __init__(self, demo: DemoConfig, validation, tokenizer, display: Display, before: dict):
        self.demo, self.validation, self.tokenizer = demo, validation, tokenizer
        self.display, self.before = display, before
        self.trainer = None
        self.start = time.perf_counter()
        self.curve: list[dict] = []
        self.next_point = 1
        self.last_reward: float | None = None
        self.last_fraction = 0.0
        self.shown_points = 0

    def fraction(self, tokens: int) -> float:
        budget = self.trainer.run_plan.rollout_token_budget
        done = tokens / budget if budget else 0.0
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
        self.refresh()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        tokens = self.trainer.generated_tokens_total
        done = self.last_fraction = self.fraction(tokens)
        if done >= 1.0:
            self.evaluate(model, tokens)
            control.should_training_stop = True
        elif done * self.demo.curve_points >= self.next_point:
            self.evaluate(model, tokens)
            self.next_point = int(done * self.demo.curve_points) + 1
        return control

    def refresh(self) -> None:
        """Show the current status (a line display prints only when a validation point is new)."""
        status = Status(
            tokens=self.trainer.generated_tokens_total,
            fraction=self.last_fraction,
            reward=self.last_reward,
            point=self.curve[-1] if self.curve else self.before,
            seconds=time.perf_counter() - self.start,
        )
        self.display.show(status, new_point=len(self.curve) > self.shown_points)
        self.shown_points = len(self.curve)


@dataclass
class _RunResult:
    """One training run: its trainer, its validation curve, and whether Ctrl-C cut it short."""

    trainer: LooGspoTrainer
    curve: list[dict]
    seconds: float
    interrupted: bool


def common_args(demo: DemoConfig, output_dir: Path) -> dict[str, Any]:
    """The training settings every demo run shares (the recommended config, the stock baseline, and the runs of an
    ablation on a built-in demo task): a ``LooGspoConfig`` / ``LooGspoConfig.stock_trl`` keyword mapping for ``demo``
    writing to ``output_dir``, on the CPU, stopped by the rollout-token budget rather than ``max_steps``."""
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
    return LooGspoConfig(**common_args(demo, output_dir))


def baseline_config(demo: DemoConfig, output_dir: Path) -> LooGspoConfig:
    """Stock TRL GRPO: TRL's loss and defaults (token-level ratio, dapo loss, group-std scaling) on the same trainer
    (TRL's code computes the loss and the advantages), same budget and batch."""
    return LooGspoConfig.stock_trl(**common_args(demo, output_dir))


@dataclass
class _Session:
    """What every training run of one demo shares."""

    demo: DemoConfig
    console: Any
    tokenizer: Any
    train: Any
    validation: Any
    before: dict
    ctrl_c: CtrlC


def _train(name: str, trainer_cls: type, args: LooGspoConfig, model, session: _Session) -> _RunResult:
    """Train one run to the budget, or until Ctrl-C (first press: at the end of the step; second: at once)."""
    demo, ctrl_c = session.demo, session.ctrl_c
    trainer = trainer_cls(
        model=model,
        reward_funcs=[addition_reward],
        args=args,
        train_dataset=session.train,
        processing_class=session.tokenizer,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(SummaryTable)  # printed by run_demo once the progress display has stopped
    display = make_display(session.console, name, session.before, demo.quiet)
    callback = _BudgetAndCurve(demo, session.validation, session.tokenizer, display, session.before)
    callback.trainer = trainer
    if demo.rollout_tokens > 0:  # the token budget joins the trainer's run plan (its sampling rounds stop at it too)
        trainer.add_callback(RolloutTokenBudget(demo.rollout_tokens))
    trainer.add_callback(callback)
    trainer.add_callback(StopOnCtrlC(ctrl_c))
    start = time.perf_counter()
    killed = False
    with display:
        try:
            trainer.train()
        except KeyboardInterrupt:  # a second Ctrl-C (or one outside the main thread): stop now, keep the curve
            killed = True
        callback.refresh()  # a validation point measured in the step that was cut short
    return _RunResult(trainer, callback.curve, time.perf_counter() - start, killed or ctrl_c.requested)


def _run_record(before: dict, after: dict | None, result: _RunResult, args) -> dict:
    """One run's entry in metrics.json (``after`` is None when Ctrl-C skipped the final evaluation)."""
    trainer = result.trainer
    return {
        "before": before,
        "after": after,
        "interrupted": result.interrupted or after is None,
        "rollout_tokens": trainer.generated_tokens_total,
        "steps": trainer.state.global_step,
        "train_seconds": round(result.seconds, 1),
        "curve": [{"rollout_tokens": 0, **before, "seconds": 0.0}, *result.curve],
        "config": {k: v for k, v in args.to_dict().items() if not k.startswith("_")},
    }


def _write_json(path: Path, payload: dict) -> None:
    """Write JSON atomically (a temporary file beside it, then a rename): never a half-written metrics.json."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(payload, indent=2, default=str))
    os.replace(partial, path)


def _interrupted_line(runs: dict, planned: list[str], output_dir: Path) -> str:
    """The one line printed when Ctrl-C stopped the demo: where it stopped and where the partial results are."""
    name, run = next(reversed(runs.items()))
    points = len(run["curve"]) - 1
    if run["after"] is None:
        kept = f"{points} validation point{'' if points == 1 else 's'} kept"
        stopped = f"{run['rollout_tokens']:,} rollout tokens (step {run['steps']}"
        where = f"{name} stopped at {stopped}, {kept}, no final evaluation)"
    else:
        where = f"{name} finished; {', '.join(planned[len(runs) :])} not run"
    return (
        f"Interrupted (Ctrl-C): {where}. Partial results: {output_dir / 'metrics.json'} and "
        f"{output_dir / 'learning_curve.png'}"
    )


def run_demo(demo: DemoConfig) -> dict:
    """Run the demo and return its metrics (also written to ``<output_dir>/metrics.json``).

    Ctrl-C during training stops it cleanly: the metrics measured so far are written (``"interrupted": true``, the
    curve points so far, ``"after": null``) with the plot, one line says so, and ``metrics["interrupted"]`` is set
    (the CLI then exits with status 130). Ctrl-C before training raises KeyboardInterrupt and writes nothing (an
    interrupted warm start leaves no cache entry).
    """
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # transformers' v6 renames (gradient_checkpointing -> activation_checkpointing) are not the user's concern here
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    console = make_console(demo.quiet)

    def log(message: str) -> None:
        console.print(message, soft_wrap=True, markup=False)

    total_start = time.perf_counter()
    output_dir, note = prepare_output_dir(demo.output_dir, demo.overwrite)  # a complete earlier run is kept
    if note:
        log(note)
    torch.manual_seed(demo.seed)

    task = AdditionTask(digits=demo.digits, seed=demo.seed)
    spec = PolicySpec(task=task, seed=demo.seed, **demo.policy_overrides)
    cache_dir = Path(demo.cache_dir) if demo.cache_dir else None
    policy, tokenizer, policy_info = load_or_build_policy(spec, cache_dir, demo.fresh, log)
    train, validation = task.splits()
    before = _evaluate(demo, policy, tokenizer, validation)
    log(f"Held-out pass rate before training: greedy {before['greedy']:.3f}, sampled {before['sampled']:.3f}")

    plans = [("LOO-GSPO", LooGspoTrainer, recommended_config(demo, output_dir / "loo_gspo"))]
    if demo.baseline:
        plans.append(("stock GRPO", LooGspoTrainer, baseline_config(demo, output_dir / "stock_grpo")))
    with CtrlC() as ctrl_c:  # from here on, the first Ctrl-C stops training and the results so far are written
        runs = _train_all(plans, policy, _Session(demo, console, tokenizer, train, validation, before, ctrl_c))
        ctrl_c.writing = True
        # (Ctrl-C during the last run's final evaluation stops nothing: that run is complete)
        interrupted = len(runs) < len(plans) or any(run["interrupted"] for run in runs.values())
        metrics = {
            "package_version": __version__,
            "torch": torch.__version__,
            "machine": platform.machine(),
            "demo": asdict(demo),
            "task": task.settings(),
            "train_size": len(train),
            "validation_size": len(validation),
            "policy": policy_info,
            "interrupted": interrupted,
            "output_dir": str(output_dir),
            "runs": runs,
            "total_seconds": round(time.perf_counter() - total_start, 1),
        }
        _write_json(output_dir / "metrics.json", metrics)
        plot_curves(runs, output_dir / "learning_curve.png", interrupted=interrupted)
    if interrupted:
        log(_interrupted_line(runs, [name for name, _, _ in plans], output_dir))
        metrics["table"] = None
        return metrics
    table = before_after_table(runs)
    console.print(table)
    log(f"Wrote {output_dir / 'metrics.json'} and {output_dir / 'learning_curve.png'}")
    log(f"Output directory: {output_dir.resolve()}  (total {metrics['total_seconds']:.0f} s)")
    metrics["table"] = table
    return metrics


def _evaluate(demo: DemoConfig, model, tokenizer, validation) -> dict:
    """Greedy and sampled held-out pass rates, with the demo's settings."""
    return pass_rates(
        model, tokenizer, validation, samples=demo.eval_samples, max_new_tokens=demo.digits + 2, seed=demo.seed
    )


def _train_all(plans: list[tuple], policy, session: _Session) -> dict:
    """Train a copy of ``policy`` per plan, in order; Ctrl-C ends the current run and skips the rest.

    Returns ``{name: run record}`` for the runs that started. After each complete run its trainer's run summary
    table is printed (once its progress display has stopped). A second Ctrl-C while the first run is being set up
    raises KeyboardInterrupt (there is nothing to write yet).
    """
    runs = {}
    demo = session.demo  # (session.demo may become a token budget below; evaluation settings stay the same)
    for name, trainer_cls, args in plans:
        try:
            model = copy.deepcopy(policy)
            result = _train(name, trainer_cls, args, model, session)
        except KeyboardInterrupt:  # a second Ctrl-C while this run was being set up: keep the runs before it
            if not runs:
                raise
            break
        if session.demo.minutes is not None:  # the first run's tokens become the token budget of the comparison
            session.demo = replace(session.demo, minutes=None, rollout_tokens=result.trainer.generated_tokens_total)
        after = None
        if not result.interrupted:
            after = _evaluate_unless_killed(demo, model, session.tokenizer, session.validation)
        runs[name] = _run_record(session.before, after, result, args)
        if runs[name]["interrupted"] or session.ctrl_c.requested:
            break
        if result.trainer.run_plan.records.summary_table and not demo.quiet:
            session.console.print(run_summary_table(name, result.trainer))
    return runs


def _evaluate_unless_killed(demo: DemoConfig, model, tokenizer, validation) -> dict | None:
    """The final evaluation; None when a second Ctrl-C cuts it short."""
    try:
        return _evaluate(demo, model, tokenizer, validation)
    except KeyboardInterrupt:
        return None


def run_summary_table(name: str, trainer):
    """The trainer's run summary (``reporting.summary_rows``) as a rich table."""
    return summary_table(
        summary_rows(trainer.state.log_history, trainer.run_facts()), f"{name} run summary: {trainer.args.output_dir}"
    )


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


def plot_curves(runs: dict, path: Path, interrupted: bool = False) -> None:
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
    title = "trl-loo-gspo demo: held-out pass rate vs rollout tokens"
    if interrupted:  # on a line of its own: appended, the title no longer fits the figure's width
        title += "\n(interrupted by Ctrl-C: partial results)"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
