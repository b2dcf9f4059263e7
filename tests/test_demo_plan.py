"""The shipped smaller plan (recipes/ablations/demo.yaml, issue 46): the runner accepts it, every run updates
off-policy (so that the clip can act), no two runs train the same thing, each ablation differs from its base in
exactly the fields it names, and the README states its size (no model is trained here).

The on-policy plan it replaced failed these checks: with one optimizer step per generation round every ratio is 1,
and stock GRPO and GSPO + token-total then train bit-identically (docs/results/README.md, `demo-ablation/`);
``test_the_old_on_policy_plan_is_refused_by_these_checks`` keeps that failure reachable."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import pytest
import yaml

from trl_loo_gspo.experiment.ablation.plan import AblationPlan, run_args

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "recipes" / "ablations" / "demo.yaml"
#: Fields that name the run, not the method (its output folders).
RUN_IDENTITY = {"output_dir", "logging_dir", "run_name"}
#: Contrasts this task cannot show (the plan's header), as the one field and the two values a pair of runs would
#: differ in: answers of 2-4 tokens (token-total vs per-answer weighting barely differ) and K = 8 fixed (leave-one-out
#: is 8/7 x mean-centring, which Adam cancels).
CANNOT_SHOW = {"loss_aggregation": {"token_total", "sequence_mean"}, "advantage_estimator": {"loo", "group_mean"}}


def training_args(plan: AblationPlan) -> dict:
    """Each run's training config, built as its run builds it (first seed)."""
    return {name: run_args(plan, name, cfg, is_base, plan.seeds[0]) for name, cfg, is_base in plan.entries()}


def fields_of(args) -> dict:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init and f.name not in RUN_IDENTITY}


def steps_per_round(args) -> int:
    """Optimizer steps per generation round: 1 is on-policy (every ratio is 1: the clip never acts)."""
    return args.steps_per_generation * args.num_iterations // args.gradient_accumulation_steps


def problems(plan: AblationPlan) -> list[str]:
    """What would make the plan unable to show a clip acting, or two of its runs the same run."""
    built = training_args(plan)
    found = [f"{name}: on-policy (1 optimizer step per round)" for name, a in built.items() if steps_per_round(a) < 2]
    for (a, args_a), (b, args_b) in itertools.combinations(built.items(), 2):
        fa, fb = fields_of(args_a), fields_of(args_b)
        differ = {key for key in fa if fa[key] != fb[key]}
        if not differ:
            found.append(f"{a} and {b}: the same training config")
        elif len(differ) == 1 and {fa[key] for key in differ} | {fb[key] for key in differ} == CANNOT_SHOW.get(
            next(iter(differ))
        ):
            found.append(f"{a} and {b}: differ only in {sorted(differ)}, which this task cannot show")
    return found


@pytest.fixture(scope="module")
def plan() -> AblationPlan:
    return AblationPlan.from_yaml(PLAN)  # the runner's loader: every key and every run's config checked


def test_the_shipped_plan_loads_and_is_the_size_its_header_and_the_readme_state(plan):
    assert plan.task == "demo-addition" and len(plan.entries()) == 6 and plan.seeds == [0, 1, 2, 3, 4]
    assert plan.rollout_tokens == 150_000 and len(plan.runs()) == 30
    header = PLAN.read_text().split("\noutput_dir:")[0]
    assert "6 configurations x 5 seeds = 30 runs of 150k generated tokens" in header
    assert "MEASURED" in header and "What it can show" in header and "What it cannot show" in header
    readme = (ROOT / "README.md").read_text()
    start = readme.index("`recipes/ablations/demo.yaml` is a smaller plan")
    sentence = " ".join(readme[start : readme.index("\n\n", start)].split())  # its lines, up to the blank line
    assert "6 configurations × 5 seeds" in sentence and "off-policy" in sentence and "measured" in sentence
    assert "cannot" in sentence
    assert not plan.output_dir.startswith("docs")


def test_every_run_updates_off_policy_so_the_clip_can_act(plan):
    assert plan.common["steps_per_generation"] == 4 and plan.common["per_device_train_batch_size"] == 64
    for name, args in training_args(plan).items():
        assert steps_per_round(args) == 4, name
        assert args.generation_batch_size == 256 and args.num_generations == 8, name  # 32 prompts x 8 answers


def test_no_two_runs_train_the_same_thing(plan):
    assert problems(plan) == []
    objectives = {name: args.objective for name, args in training_args(plan).items()}
    assert objectives["grpo"].loss_type == "dapo" and not objectives["grpo"].uses_own_loss  # stock TRL
    assert objectives["full"].policy_loss == "response_clip"
    assert objectives["full-token_ratio"].policy_loss == "token_clip"


def test_each_ablation_differs_from_its_base_in_exactly_the_fields_it_names(plan):
    raw = {v["name"]: v for v in yaml.safe_load(PLAN.read_text())["variants"]}
    built = {name: fields_of(args) for name, args in training_args(plan).items()}
    ablations = {name: v for name, v in raw.items() if "base" in v}
    assert set(ablations) == {"full-token_ratio", "full-clip_target", "full-no_ds"}
    for name, variant in ablations.items():
        mine, base = built[name], built[variant["base"]]
        assert {key for key in mine if mine[key] != base[key]} == set(variant["config"]), name
    assert {tuple(pair) for pair in plan.contrasts} == {("full", name) for name in ablations}
    assert plan.primary == ["full", "grpo"]


def test_the_old_on_policy_plan_is_refused_by_these_checks(tmp_path):
    """The plan before issue 46 (one update per round): these checks name its on-policy runs and its pair that
    cannot differ. Keeps ``problems`` able to fail."""
    old = yaml.safe_load(PLAN.read_text())
    old.update(
        output_dir=str(tmp_path / "out"),
        seeds=[0],
        common={"learning_rate": 1.0e-4},
        contrasts=[],
        primary=None,
        variants=[
            {"name": "gspo", "config": {"advantage_estimator": "grpo", "loss_aggregation": "sequence_mean"}},
            {"name": "gspo+loo", "config": {"advantage_estimator": "loo", "loss_aggregation": "sequence_mean"}},
            {"name": "gspo+token_total", "config": {"advantage_estimator": "grpo", "loss_aggregation": "token_total"}},
        ],
    )
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    found = problems(AblationPlan.from_yaml(tmp_path / "old.yaml"))  # the runner accepts it: the checks here do not
    assert "grpo: on-policy (1 optimizer step per round)" in found
    assert any(re.match(r"gspo and gspo\+token_total: differ only in \['loss_aggregation'\]", p) for p in found)
    assert not any(p.startswith("gspo and gspo+loo") for p in found)  # std-scaled vs LOO: not a constant factor
