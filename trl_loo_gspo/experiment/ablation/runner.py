"""Run an ablation plan (:mod:`.plan`): train every (variant, seed) to the rollout-token budget, evaluating on the
validation split along the way; keep one record per run (``runs/<variant>/seed<k>.json``, finished runs are skipped,
so a killed ablation continues where it stopped); then write the report from the records (:mod:`.report`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from pathlib import Path

from .evaluation import evaluation_record
from .plan import AblationPlan, demo_args, demo_task, recipe_args, run_path
from .progress import AblationProgress
from .provenance import StaleRecordsError, run_provenance, stale_reason
from .report import CSV_COLUMNS, PROCESS_KEYS, announced_files, plot, report, write_outputs  # noqa: F401
from .sweep import (
    cell_fields,
    cell_label,
    check_interior,
    choose,
    eval_every,
    grid_runs,
    sweep_budget,
    sweep_cell,
    sweep_runs,
    with_choices,
)


def run_one(
    plan: AblationPlan,
    name: str,
    overrides: dict,
    is_baseline: bool,
    seed: int,
    progress=None,
    split: str = "validation",
    eval_every_tokens: int | None = None,
    output_dir: str | None = None,
) -> dict:
    """Train one (variant, seed) to the token budget; evaluate along the way on ``split`` (``"validation"``, or
    ``"tuning"`` for a learning-rate sweep run: :mod:`.sweep`, the sweep's budget) every ``eval_every_tokens``
    (default: the plan's spacing for ``split``); return the record. ``output_dir``: the trainer's folder (default:
    the record's path without ``.json``; a common-rate run gets its own, beside its record)."""
    build = _build_recipe_run if plan.task == "recipe" else _build_demo_run
    trainer, validation_cb, verifier, extra = build(plan, name, overrides, is_baseline, seed, split, output_dir)
    if eval_every_tokens is not None:  # (the common-rate runs: compared on their final point only)
        validation_cb.every_tokens = validation_cb.next_checkpoint = int(eval_every_tokens)
    budget = sweep_budget(plan) if split == "tuning" else plan.rollout_tokens
    return _train_to_budget(
        budget, trainer, validation_cb, verifier, name, overrides, is_baseline, seed, progress, extra
    )


def _build_demo_run(
    plan: AblationPlan, name: str, overrides: dict, is_baseline: bool, seed: int, split: str, output_dir: str | None
):
    """A built-in demo task: its warm-started policy (cached), its exact verifier (with span signals for the
    multi-step task, used only when a run sets ``process_advantage_coef``), scored on ``split``."""
    from ...demo.policy import PolicySpec, load_or_build_policy
    from ...trainer.validation import ValidationCallback

    task, verifier = demo_task(plan, seed)
    spec = PolicySpec(task=task, seed=seed, **plan.policy)
    policy, tokenizer, policy_info = load_or_build_policy(spec, log=lambda _: None)
    train, validation = task.splits()
    if split == "tuning":
        validation = task.tuning_split()
    args = demo_args(plan, name, overrides, is_baseline, seed, task, tuning=split == "tuning", output_dir=output_dir)
    trainer = _trainer_cls()(
        model=copy.deepcopy(policy),
        reward_funcs=[verifier],
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
    )
    validation_cb = ValidationCallback(
        trainer,
        validation,
        verifier,
        eval_every(plan, split),
        samples=plan.eval_samples,
        seed=seed,
        curve_samples=plan.eval_curve_samples,
        strata="terms" if "terms" in validation.column_names else None,  # (demo-mixed: the number of terms)
    )
    trainer.add_callback(validation_cb)
    extra = {"policy_key": policy_info["key"], "split": split}
    if split == "tuning":
        extra["learning_rate"] = overrides.get("learning_rate", plan.common.get("learning_rate"))
    return trainer, validation_cb, verifier, extra


def _trainer_cls():
    from ...trainer import LooGspoTrainer

    return LooGspoTrainer


def _build_recipe_run(
    plan: AblationPlan, name: str, overrides: dict, is_baseline: bool, seed: int, split: str, output_dir: str | None
):
    """A recipe task: model, data, verifier and validation split from a ``trl-loo-gspo train`` recipe YAML."""
    from ...trainer.validation import ValidationCallback
    from ..build import build_trainer

    stock = is_baseline and plan.stock_baseline
    script_args, training_args, model_args = recipe_args(plan, name, overrides, stock, seed, output_dir=output_dir)
    trainer = build_trainer(script_args, training_args, model_args)
    validation_cb = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, ValidationCallback))
    return trainer, validation_cb, validation_cb.verifier, {"recipe": str(plan.recipe)}


def _train_to_budget(budget, trainer, validation_cb, verifier, name, overrides, is_baseline, seed, progress, extra):
    from transformers.trainer_callback import PrinterCallback

    from ...trainer.budget import RolloutTokenBudget
    from ...trainer.reporting import SummaryTable

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(SummaryTable)  # (its figures are in the record; the display prints one line per run)
    # the plan's budget joins the trainer's run plan (trainer.run_plan), which the sampling rounds and the steps read
    trainer.add_callback(RolloutTokenBudget(budget, progress))
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    validation_cb.finish()  # the final point, with every sample
    evaluations = evaluation_record(validation_cb.history, validation_cb.details, validation_cb.labels(), budget)
    logs = [h for h in trainer.state.log_history if "loss" in h]

    def mean_of(key: str) -> float:
        values = [h[key] for h in logs if key in h and h[key] is not None]
        return sum(values) / len(values) if values else math.nan

    return {
        "name": name,
        "seed": seed,
        "baseline": is_baseline,
        "trainer": type(trainer).__name__,
        **evaluations,
        "generated_tokens": trainer.generated_tokens_total,
        "effective_tokens": getattr(trainer, "effective_tokens_total", None),
        "steps": trainer.state.global_step,
        "steps_per_generation": getattr(trainer.args, "steps_per_generation", None),
        "seconds": round(seconds, 1),
        "clip_fraction": mean_of("clip_ratio/region_answers")
        if "clip_ratio/region_answers" in (logs[0] if logs else {})
        else mean_of("clip_ratio/region_mean"),
        "clip_fraction_tokens": mean_of("clip_ratio/region_mean"),  # token-weighted, every loss (TRL's name)
        **clip_record(trainer),
        "group_size_mean": mean_of("groups/size_mean"),
        "group_size_sd": mean_of("groups/size_sd"),
        "entropy": mean_of("entropy"),
        "kl": mean_of("kl"),
        "filtered_fraction": mean_of("sampling/frac_filtered"),
        "truncation": mean_of("completions/clipped_ratio"),
        "valid_groups": mean_of("groups/frac_with_signal"),
        "anomalies": mean_of(f"verifiers/{getattr(verifier, 'name', 'verifier')}/unscorable"),
        "overrides": overrides,
        "process_log": [
            {"step": h.get("step"), **{k: h[k] for k in PROCESS_KEYS if k in h}}
            for h in logs
            if "process/signal_mean" in h
        ],
        **extra,
    }


def clip_record(trainer) -> dict:
    """Where the run's clip bit (docs/metrics.md, "Where the clip bites"): the run's tally by position in the
    generation round and its headline figures; ``None`` for a loss TRL computes (it keeps no per-answer decisions)."""
    control = getattr(trainer, "clip_control", None)
    stats = control.summary() if control is not None and control.tally else None
    offpolicy = stats["offpolicy"] if stats else {}
    return {
        "clip_stats": stats,
        "offpolicy_clip_fraction": offpolicy.get("clipped_fraction"),
        "gradient_answers": stats["all"]["gradient_answers"] if stats else None,
        "gradient_tokens": stats["all"]["gradient_tokens"] if stats else None,
        "epsilon_low_final": stats["epsilon_low"] if stats else None,
        "epsilon_high_final": stats["epsilon_high"] if stats else None,
    }


def run_ablation(
    plan: AblationPlan, runner=run_one, reuse_stale: bool = False, progress: AblationProgress | None = None
) -> list[dict] | None:
    """Run every missing (variant, seed), then write the CSV, the report and the plot; return the records.

    With a ``sweep`` (:mod:`.sweep`), the sweep's runs come first (scored on the tuning split), and each variant's
    study runs train at the learning rate it chose. Resumable: finished runs are read back, never redone — if their
    record was made by this code for this config (:mod:`.provenance`); a record made by other code or for another
    config raises :class:`StaleRecordsError` before anything trains, unless ``reuse_stale`` (reuse them on purpose).
    Several processes may run the same plan at once (e.g. one per core): each claims a run before training it
    (:mod:`.claims`, a file lock) and skips runs another live process holds; a process that runs out of sweep runs
    waits for the others' to finish (the choice needs them all); the process that finds every run finished writes
    the outputs, the others return ``None``. ``progress``: what is printed meanwhile (default: on stdout, one
    display per terminal, one line per run in a log file: :mod:`.progress`).
    """
    plan.check_configs()  # every run's config, before the first one trains
    with progress if progress is not None else AblationProgress() as display:
        return _run_phases(plan, runner, reuse_stale, display)


def _run_phases(plan: AblationPlan, runner, reuse_stale: bool, display: AblationProgress) -> list[dict] | None:
    sweep_records: list[dict] = []
    runs = plan.runs()
    if plan.sweep:
        sweep_records = _tune(plan, sweep_runs(plan), runner, reuse_stale, display)
        check_interior(plan, sweep_records)  # (with require_interior: nothing trains at an unbracketed choice)
        chosen = choose(plan, sweep_records)
        second = grid_runs(plan, chosen)  # ablations with a grid of their own, at their root's choice
        if second:
            sweep_records += _tune(plan, second, runner, reuse_stale, display)
            check_interior(plan, sweep_records)
            chosen = choose(plan, sweep_records)
        runs = with_choices(runs, chosen)
    split = plan.eval_split
    jobs = [
        (name, cfg, base, seed, run_path(plan, name, seed), run_provenance(plan, name, cfg, base, seed, split))
        for name, cfg, base, seed in runs
    ]
    if not reuse_stale:
        _refuse_stale(plan, [(name, seed, path, prov) for name, _, _, seed, path, prov in jobs])
    common_jobs = common_rate_jobs(plan, chosen) if plan.common_rate is not None else []
    if common_jobs and not reuse_stale:
        _refuse_stale(plan, [(name, seed, path, prov) for name, _, _, seed, path, prov, _ in common_jobs])
    # the common-rate runs need only the sweep: a worker goes on to them while others finish the study's last runs
    display.phase(split, _labelled(jobs, plan if plan.sweep else None), plan.rollout_tokens)
    _execute(plan, jobs, runner, split, display)
    if common_jobs:
        display.phase(split, _labelled(common_jobs), plan.rollout_tokens, common=True)
        _execute(plan, common_jobs, runner, split, display)
    # asked after both phases: a study run another worker held when this one left the study may be finished now
    left = sum(not job[4].exists() for job in [*jobs, *common_jobs])
    if left:
        display.left_to_others(left)
        return None  # still being trained by another process: the one that finishes last writes the outputs
    records = [json.loads(job[4].read_text()) for job in jobs]
    common_records = [json.loads(job[4].read_text()) for job in common_jobs] if plan.common_rate is not None else None
    out = Path(plan.output_dir)
    started = display.report_phase(out, announced_files())
    display.wrote(out, write_outputs(plan, records, sweep_records, common_records), started)
    return records


def _tune(plan: AblationPlan, runs: list, runner, reuse_stale: bool, display: AblationProgress) -> list[dict]:
    """Train one tuning phase's runs (name, overrides, is_baseline, seed, cell), waiting for those other processes
    hold (the choice needs them all); return their records."""
    jobs = [
        (name, cfg, base, seed, path, run_provenance(plan, name, cfg, base, seed, "tuning"))
        for name, cfg, base, seed, cell in runs
        for path in [run_path(plan, name, seed, cell=cell)]
    ]
    if not reuse_stale:
        _refuse_stale(plan, [(name, seed, path, prov) for name, _, _, seed, path, prov in jobs])
    display.phase("tuning", _labelled(jobs, plan), sweep_budget(plan))
    while not _execute(plan, jobs, runner, "tuning", display):
        display.waiting(sum(not job[4].exists() for job in jobs))
        time.sleep(10)  # another process is training the last sweep runs
    return [json.loads(job[4].read_text()) for job in jobs]


def _label(name: str, overrides: dict, seed: int, plan: AblationPlan | None = None) -> str:
    """``name seed k lr x`` and, for a sweep run of a variant with a grid, the grid's values."""
    rate = overrides.get("learning_rate")
    label = f"{name} seed {seed}" + (f" lr {rate:g}" if rate is not None else "")
    grid = [f for f in cell_fields(plan, name) if f != "learning_rate" and f in overrides] if plan else []
    return label + "".join(f" {field} {cell_label({'': overrides[field]})}" for field in grid)


def _labelled(jobs: list, plan: AblationPlan | None = None) -> list[tuple[str, Path]]:
    """(label, record path) of each job, for the display."""
    return [(_label(name, overrides, seed, plan), path) for name, overrides, _, seed, path, *_ in jobs]


def common_rate_jobs(plan: AblationPlan, chosen: dict[str, dict]) -> list[tuple]:
    """Every swept (variant, seed) at the plan's ``common_rate`` — the baseline and the variants without a ``base``;
    an ablation already trains at its root's rate —: the study's own run where the variant chose that rate (same
    config, same record), else a run recorded under ``common-rate/<variant>/seed<k>.json`` and evaluated every
    ``common_rate_eval_every_tokens`` (when the plan sets it: the comparison reads only the final point). Each job
    is (name, overrides, is_baseline, seed, record path, provenance, evaluation spacing or ``None``)."""
    jobs = []
    ablations = plan.bases()
    for name, cfg, base, seed in plan.runs():
        if name in ablations:
            continue
        overrides = {**cfg, **chosen[name], "learning_rate": plan.common_rate}  # (at its chosen grid value)
        # the study's run (same config): its record, its spacing
        if math.isclose(chosen[name]["learning_rate"], plan.common_rate, rel_tol=1e-12):
            path, every = run_path(plan, name, seed), None
        else:
            path = Path(plan.output_dir) / "common-rate" / name / f"seed{seed}.json"
            every = plan.common_rate_eval_every_tokens
        provenance = run_provenance(plan, name, overrides, base, seed, plan.eval_split, eval_every_tokens=every)
        jobs.append((name, overrides, base, seed, path, provenance, every))
    return jobs


def _execute(plan: AblationPlan, jobs: list, runner, split: str, display: AblationProgress | None = None) -> bool:
    """Train every job (name, overrides, is_baseline, seed, record path, provenance[, evaluation spacing]) that has
    no record and that no other process holds; return whether every job has its record now."""
    from .claims import claim

    display = display if display is not None else AblationProgress(lock_path=None)
    budget = sweep_budget(plan) if split == "tuning" else plan.rollout_tokens
    kwargs = {"split": split} if split == "tuning" else {}  # (runners written for plans without a sweep)
    for name, overrides, is_baseline, seed, path, provenance, *spacing in jobs:
        lock = None if path.exists() else claim(path)
        if lock is None:  # finished earlier, or another process is training it
            continue
        try:
            if path.exists():  # finished by another process between the check and the claim
                continue
            label = _label(name, overrides, seed, plan if plan.sweep else None)
            report_tokens = display.start(label, budget)
            every = spacing[0] if spacing else None
            extra = {} if every is None else {"eval_every_tokens": every}
            if spacing and path != run_path(plan, name, seed):  # a common-rate run: not the study run's folder
                extra["output_dir"] = str(path.with_suffix(""))
            try:
                with display.training():
                    record = runner(plan, name, overrides, is_baseline, seed, report_tokens, **kwargs, **extra)
            except BaseException:
                display.stopped()
                raise
            record["provenance"] = provenance
            if split == "tuning":  # (whatever the runner: the cell the choice reads)
                record["sweep_cell"] = sweep_cell(plan, name, overrides)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(record, indent=2, default=str))
            tmp.replace(path)  # atomic: a killed run leaves no half-written record
            display.finish(label, path, record)
        finally:
            lock.release()
    return all(job[4].exists() for job in jobs)


def _refuse_stale(plan: AblationPlan, records: list[tuple[str, int, Path, dict]]) -> None:
    """Raise :class:`StaleRecordsError` listing each existing record (name, seed, path, expected provenance) that
    was not made by this code for this run."""
    stale = []
    for name, seed, path, provenance in records:
        if not path.exists():
            continue
        try:
            why = stale_reason(json.loads(path.read_text()), provenance)
        except (OSError, ValueError):
            why = "unreadable"
        if why is not None:
            where = f" (sweep, {path.parent.name})" if path.parent.parent.name == name else ""
            stale.append(f"{name} seed {seed}{where}: {why}")
    if stale:
        listed = "\n".join(f"  - {line}" for line in stale)
        raise StaleRecordsError(
            f"{len(stale)} run record(s) in {plan.output_dir} were not made by this code for this plan and are not"
            f" reused:\n{listed}\nTrain them afresh in another directory (--output-dir) or delete them; to reuse"
            " them on purpose, pass --reuse-stale (their provenance stays in each record)."
        )
