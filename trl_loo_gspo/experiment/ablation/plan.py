"""The plan of an equal-budget ablation (``trl-loo-gspo ablate CONFIG.yaml``, method §5.2): the YAML, its checks, the
run matrix and each run's training config (no model, no trainer; :mod:`.runner` trains the runs).

The YAML names a baseline (a stock TRL ``GRPOTrainer`` configuration), variants (``LooGspoTrainer`` flag overrides),
seeds, and one rollout-token budget for all. Every (variant, seed) run trains from the same warm-started policy,
is evaluated on the validation split at fixed rollout-token checkpoints, and writes ``runs/<variant>/seed<k>.json``;
finished runs made by the same code for the same config are skipped (others are refused: :mod:`.provenance`), so a
killed ablation continues where it stopped. Then ``results.csv``, ``report.md``
(paired differences vs the baseline with 95% intervals and a verdict per variant) and ``pass_rate_vs_tokens.png``.

Built-in tasks: ``demo-addition`` (the offline demo's task and policy), ``demo-multistep`` (worked multi-step
sums, with span signals), ``demo-mixed`` (sums of 1–4 numbers of 1–3 digits: mixed difficulty, lengths). Schema::

    output_dir: outputs/ablations/demo
    task: demo-addition
    seeds: [0, 1, 2]
    rollout_tokens: 300000
    eval_every_tokens: 50000
    eval_samples: 4
    task_options: {max_terms: 3}              # the built-in task's settings (e.g. MixedSumTask fields)
    split_seed: 0                             # one data split for every seed (default: each seed its own)
    common: {learning_rate: 1.0e-4}          # applied to every run (baseline included)
    sweep:                                    # optional: each run's learning rate chosen per variant (.sweep)
      learning_rates: [5.0e-5, 1.0e-4, 2.0e-4]
      seeds: [100]                            # disjoint from `seeds`
    baseline: {name: grpo, config: {}}        # TRL's GRPO (LooGspoConfig.stock_trl): TRL's defaults + these
    variants:                                 # each a LooGspoConfig: our defaults plus these overrides
      - {name: loo_gspo, config: {}}
      - {name: loo_gspo-mean, base: loo_gspo, config: {advantage_estimator: group_mean}}
    common_rate: 1.0e-4                       # optional, with a sweep: every variant also at this one rate
    common_rate_eval_every_tokens: 300000     # optional: their evaluation spacing (default: eval_every_tokens)

A variant with ``base`` is an ablation of another variant: its config is the base's config (itself resolved the same
way) with its own ``config`` on top, so the two differ in exactly the fields it names — the learning rate included:
a sweep does not tune it, it trains at the rate its root variant chose (tuning it separately would change a second
field).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .sweep import cell_label, grid_cells, sweep_cell, sweep_problems

TASKS = ("demo-addition", "demo-multistep", "demo-mixed", "recipe")
BASELINE_TRAINERS = ("grpo", "loo_gspo")


@dataclass
class AblationPlan:
    """An ablation plan as the YAML states it (see the module docstring for the schema)."""

    output_dir: str
    seeds: list[int]
    rollout_tokens: int
    variants: list[dict[str, Any]]
    baseline: dict[str, Any]
    task: str = "demo-addition"
    eval_every_tokens: int = 50_000
    eval_samples: int = 4
    # sampled answers per problem at the evaluation points between the start and the end (None: eval_samples; 0:
    # greedy only there — the start and the final point always draw eval_samples)
    eval_curve_samples: int | None = None
    common: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)  # PolicySpec overrides (tests use a tiny policy)
    recipe: str | None = None  # task "recipe": a `trl-loo-gspo train` YAML (model, data, verifier, validation)
    recipe_overrides: list[str] = field(default_factory=list)  # command-line flags applied on top of the recipe
    contrasts: list[list[str]] = field(default_factory=list)  # [a, b] pairs reported as a − b, paired by seed
    task_options: dict[str, Any] = field(default_factory=dict)  # settings of the built-in task (its dataclass)
    split_seed: int | None = None  # the data split's seed for every run (None: each run's seed)
    sweep: dict[str, Any] = field(default_factory=dict)  # learning-rate sweep on the tuning split (.sweep)
    common_rate: float | None = None  # with a sweep: every variant also trained at this one learning rate
    # the common-rate runs' evaluation spacing (None: eval_every_tokens); compared on their final pass rate only, so
    # the budget (one evaluation at the start and one at the end) is enough
    common_rate_eval_every_tokens: int | None = None
    primary: list[str] | None = None  # [a, b]: the pre-registered contrast a − b, tested alone (no correction)
    eval_split: str = "validation"  # the split every run is scored on ("tuning" for a calibration plan)
    # the pre-registered primary metric: "sampled" (final_pass_rate and curve: pass rate of answers sampled at the
    # training temperature) or "greedy" (final_pass_at_1 and greedy_curve: greedy pass@1)
    primary_metric: str = "sampled"
    option_contrasts: list[list[str]] = field(default_factory=list)  # a second Holm family: the method's options

    @classmethod
    def from_yaml(cls, path: str | Path) -> AblationPlan:
        """Load and check the whole plan (every key, every run's config) before anything runs."""
        from dataclasses import fields

        from .check import config_field_names, structure_problems

        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"ablation plan {path}: expected a mapping of plan keys, got {type(data).__name__}")
        problems = structure_problems(data, [f.name for f in fields(cls)], config_field_names())
        if problems:
            raise ValueError(_problem_report(path, problems))
        plan = cls(**data)
        plan.validate()
        plan.check_configs(path)
        return plan

    def check_configs(self, source: str | Path = "plan") -> None:
        """Build every run's config (baseline included) as its run would, without a model or a trainer; raise one
        error listing every problem."""
        from .check import config_problems

        entries = self.entries()
        seed = self.seeds[0]

        def build(name: str, cfg: dict, base: bool, cpu: bool) -> Any:
            return run_args(self, name, cfg, base, seed, cpu)

        problems = config_problems(entries, build)
        grids = self.sweep.get("grids") or {}
        for name, cfg, base in [entry for entry in entries if entry[0] in grids]:  # every grid value builds too
            for cell in grid_cells(self, name):
                found = config_problems([(name, {**cfg, **cell}, base)], build)
                problems += [f"{problem} (sweep.grids cell {cell})" for problem in found]
        if problems:
            raise ValueError(_problem_report(source, problems))

    def validate(self) -> None:
        """Check the plan's own values (task, baseline trainer, recipe, budget, unique names, contrasts)."""
        if self.task not in TASKS:
            raise ValueError(f"task {self.task!r} is not one of {TASKS}")
        if self.baseline.get("trainer", "grpo") not in BASELINE_TRAINERS:
            raise ValueError(f"baseline.trainer must be one of {BASELINE_TRAINERS}, got {self.baseline['trainer']!r}")
        if self.task == "recipe" and (self.recipe is None or not Path(self.recipe).is_file()):
            raise ValueError(f"task 'recipe' needs `recipe:` naming an existing recipe YAML, got {self.recipe!r}")
        if self.task != "recipe" and (self.recipe is not None or self.recipe_overrides):
            raise ValueError("`recipe` and `recipe_overrides` are only used with task: recipe")
        if not self.seeds or self.rollout_tokens <= 0 or self.eval_every_tokens <= 0:
            raise ValueError("need seeds, rollout_tokens > 0 and eval_every_tokens > 0")
        curve = self.eval_curve_samples
        if curve is not None and not (isinstance(curve, int) and 0 <= curve <= self.eval_samples):
            raise ValueError(
                f"eval_curve_samples must be an integer in [0, eval_samples={self.eval_samples}], got {curve!r}"
            )
        if curve is not None and self.task == "recipe":
            raise ValueError("eval_curve_samples is for the built-in tasks (a recipe sets its own evaluation)")
        names = [self.baseline.get("name", "baseline")] + [v["name"] for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"run names must be unique, got {names}")
        variants = {v["name"]: v for v in self.variants}
        for v in self.variants:
            base = v.get("base")
            if base is None:
                continue
            if base not in variants or base == v["name"]:
                raise ValueError(f"variant {v['name']!r}: base {base!r} is not another variant of the plan")
            chain = [v["name"]]
            while base is not None:  # an ablation of an ablation is fine; a cycle is not
                if base in chain:
                    raise ValueError(f"variant {v['name']!r}: its bases form a cycle ({' → '.join([*chain, base])})")
                chain.append(base)
                base = variants[base].get("base")
        if self.primary is not None and not (
            isinstance(self.primary, list) and len(self.primary) == 2 and all(n in names for n in self.primary)
        ):
            raise ValueError(f"primary is one [a, b] pair of run names (from {names}), got {self.primary!r}")
        if self.eval_split not in ("validation", "tuning"):
            raise ValueError(f"eval_split must be 'validation' or 'tuning', got {self.eval_split!r}")
        if self.common_rate is not None and not (self.sweep and isinstance(self.common_rate, (int, float))):
            raise ValueError("common_rate (a learning rate every variant also trains at) needs a sweep section")
        every = self.common_rate_eval_every_tokens
        if every is not None and (self.common_rate is None or not isinstance(every, int) or every <= 0):
            raise ValueError(f"common_rate_eval_every_tokens: a positive integer, with common_rate set; got {every!r}")
        for pair in self.contrasts:
            if not (isinstance(pair, list) and len(pair) == 2 and all(name in names for name in pair)):
                raise ValueError(f"contrasts entries are [a, b] pairs of run names (from {names}), got {pair!r}")
        for pair in self.option_contrasts:
            if not (isinstance(pair, list) and len(pair) == 2 and all(name in names for name in pair)):
                raise ValueError(f"option_contrasts entries are [a, b] pairs of run names (from {names}), got {pair}")
        if self.primary_metric not in ("sampled", "greedy"):
            raise ValueError(f"primary_metric must be 'sampled' or 'greedy', got {self.primary_metric!r}")
        if self.task_options and self.task == "recipe":
            raise ValueError("`task_options` sets a built-in task's fields; a recipe task takes them from the recipe")
        if self.task != "recipe":
            try:
                demo_task(self, self.seeds[0])
            except (TypeError, ValueError) as error:
                raise ValueError(f"task_options for {self.task}: {error}") from None
            if self.eval_split == "tuning" and not demo_task(self, self.seeds[0])[0].has_tuning_split:
                raise ValueError("eval_split 'tuning' needs a task with a tuning split (task_options.tuning_*)")
        if self.sweep:
            problems = sweep_problems(self, None if self.task == "recipe" else demo_task(self, self.seeds[0])[0])
            if problems:
                raise ValueError("; ".join(problems))

    @property
    def stock_baseline(self) -> bool:
        """The baseline is stock TRL (``trainer: grpo``, the default) rather than a ``LooGspoTrainer`` config."""
        return self.baseline.get("trainer", "grpo") == "grpo"

    def entries(self) -> list[tuple[str, dict[str, Any], bool]]:
        """(name, config overrides, is_baseline): the baseline, then the variants (an ablation's overrides are its
        base's with its own on top)."""
        entries = [(self.baseline.get("name", "baseline"), self.baseline.get("config", {}), True)]
        return entries + [(v["name"], self.variant_config(v["name"]), False) for v in self.variants]

    def variant_config(self, name: str) -> dict[str, Any]:
        """A variant's overrides: its base's (recursively), then its own on top."""
        variant = next(v for v in self.variants if v["name"] == name)
        inherited = self.variant_config(variant["base"]) if variant.get("base") is not None else {}
        return {**inherited, **(variant.get("config") or {})}

    def bases(self) -> dict[str, str]:
        """Each ablation's root variant (``{name: root}``): the variant at the end of its chain of bases, whose
        learning rate it trains at."""
        parents = {v["name"]: v.get("base") for v in self.variants}
        roots = {}
        for name, parent in parents.items():
            if parent is None:
                continue
            while parents.get(parent) is not None:
                parent = parents[parent]
            roots[name] = parent
        return roots

    def runs(self) -> list[tuple[str, dict[str, Any], bool, int]]:
        """(name, config overrides, is_baseline, seed), seeds outermost so that a partial ablation is balanced."""
        return [(name, cfg, base, seed) for seed in self.seeds for name, cfg, base in self.entries()]


def _problem_report(source: str | Path, problems: list[str]) -> str:
    lines = "\n".join(f"  - {problem}" for problem in problems)
    return f"ablation plan {source}: {len(problems)} problem(s), nothing was run:\n{lines}"


def run_args(
    plan: AblationPlan, name: str, overrides: dict, is_baseline: bool, seed: int, on_cpu: bool = False
) -> Any:
    """The training config of one run, as its run builds it (no model, no trainer); ``on_cpu``: with this CPU's
    precision and device instead of the plan's (to check a GPU plan here)."""
    cpu = ["--use_cpu", "true", "--bf16", "false", "--fp16", "false"] if on_cpu else []
    if plan.task == "recipe":
        return recipe_args(plan, name, overrides, is_baseline and plan.stock_baseline, seed, extra_flags=cpu)[1]
    return demo_args(plan, name, overrides, is_baseline, seed, demo_task(plan, seed)[0])


def demo_task(plan: AblationPlan, seed: int) -> tuple[Any, Any]:
    """(task, exact verifier) of a built-in demo task with the plan's ``task_options``, its split drawn from
    ``split_seed`` (else the run's seed); the multi-step verifier emits span signals (method §6) for
    ``demo-multistep``, used only when a run sets ``process_advantage_coef``."""
    from ...demo.mixed import MixedSumTask
    from ...demo.multistep import MultiStepTask, MultiStepVerifier
    from ...demo.task import AdditionTask, AdditionVerifier

    options = {**plan.task_options, "seed": seed if plan.split_seed is None else plan.split_seed}
    if plan.task == "demo-multistep":
        return MultiStepTask(**options), MultiStepVerifier(emit_spans=True)
    if plan.task == "demo-mixed":
        task = MixedSumTask(**options)
        return task, MultiStepVerifier(answer_format=task.answer_format)
    return AdditionTask(**options), AdditionVerifier()


def demo_args(
    plan: AblationPlan,
    name: str,
    overrides: dict,
    is_baseline: bool,
    seed: int,
    task: Any,
    tuning: bool = False,
    output_dir: str | None = None,
) -> Any:
    """The ``LooGspoConfig`` of one run on a built-in demo task: the demo's settings, then ``common``, then the run's
    overrides; ``LooGspoConfig.stock_trl`` for a stock baseline. ``output_dir``: the trainer's folder (default: the
    record's path without ``.json``)."""
    from ...config import LooGspoConfig
    from ...demo.run import DemoConfig, common_args

    out = (
        Path(output_dir)
        if output_dir
        else run_path(plan, name, seed, cell=sweep_cell(plan, name, overrides) if tuning else None).with_suffix("")
    )
    settings = common_args(DemoConfig(output_dir=str(out), seed=seed), out)
    if plan.task in ("demo-multistep", "demo-mixed"):
        settings["max_completion_length"] = task.max_new_tokens
    settings.update(plan.common)
    settings.update(overrides)
    settings["register_experiment"] = False
    stock = is_baseline and plan.stock_baseline
    return LooGspoConfig.stock_trl(**settings) if stock else LooGspoConfig(**settings)


def run_path(
    plan: AblationPlan, name: str, seed: int, sweep_lr: float | None = None, cell: dict[str, Any] | None = None
) -> Path:
    """Where the record of run (``name``, ``seed``) is written: ``<output_dir>/runs/<name>/seed<k>.json``; a sweep
    run in ``cell`` (or at learning rate ``sweep_lr``): ``<output_dir>/sweep/<name>/<cell>/seed<k>.json``, the cell's
    folder named by :func:`~.sweep.cell_label` (``lr0.0001``, ``lr0.0001-epsilon0.003``...)."""
    if sweep_lr is not None:
        cell = {"learning_rate": sweep_lr, **(cell or {})}
    if cell is None:
        return Path(plan.output_dir) / "runs" / name / f"seed{seed}.json"
    return Path(plan.output_dir) / "sweep" / name / cell_label(cell) / f"seed{seed}.json"


def recipe_args(
    plan: AblationPlan,
    name: str,
    overrides: dict,
    is_baseline: bool,
    seed: int,
    extra_flags: list[str] | None = None,
    output_dir: str | None = None,
):
    """(script_args, training args, model_args) of one run of a recipe ablation; ``output_dir``: the trainer's
    folder (default ``runs/<variant>/seed<k>``).

    Variants: the recipe's ``LooGspoConfig`` plus ``common`` plus the variant's overrides. Stock baseline:
    ``LooGspoConfig.stock_trl`` (TRL's loss and defaults on the same trainer) with the recipe's values for every
    field TRL has, except the method-defining ones (our own fields and every field the objective resolves:
    ``trl_loo_gspo.config.objective.FIELDS``, e.g. ``epsilon``, ``importance_sampling_level``, ``loss_type``), which
    keep TRL's defaults; then ``common`` and the baseline's overrides.
    """
    from dataclasses import fields

    from trl import GRPOConfig

    from ...config.objective import FIELDS as OBJECTIVE_FIELDS
    from ..build import make_parser

    out = output_dir or Path(plan.output_dir) / "runs" / name / f"seed{seed}"
    argv = ["--config", str(plan.recipe), *plan.recipe_overrides, "--output_dir", str(out), "--seed", str(seed)]
    argv += ["--eval_every_tokens", str(plan.eval_every_tokens), "--eval_samples", str(plan.eval_samples)]
    argv += extra_flags or []
    script_args, training_args, model_args = make_parser().parse_args_and_config(args=argv)
    settings = {**plan.common, **overrides}
    settings.setdefault("max_steps", 10**9)  # the rollout-token budget stops training
    init_fields = {f.name for f in fields(GRPOConfig if is_baseline else type(training_args)) if f.init}
    method = ({f.name for f in fields(type(training_args))} - init_fields) | set(OBJECTIVE_FIELDS)
    explicit = set(yaml.safe_load(Path(plan.recipe).read_text()) or {})  # keys the recipe sets
    flagged = {flag[2:].split("=", 1)[0] for flag in plan.recipe_overrides if flag.startswith("--")}
    clash = sorted(flagged & set(settings))
    if clash:
        raise ValueError(f"run {name!r} sets {clash}, which recipe_overrides also sets: set it in one place")
    keep = (explicit | flagged) & init_fields
    if is_baseline:
        keep -= method
    kept = {key: getattr(training_args, key) for key in keep}
    kept.update(output_dir=str(out), seed=seed, model_init_kwargs=training_args.model_init_kwargs)
    config_cls = type(training_args)
    make = config_cls.stock_trl if is_baseline else config_cls
    return script_args, make(**{**kept, **settings}), model_args
