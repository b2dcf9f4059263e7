"""Single-field ablations (a variant with ``base``), the common-rate comparison, the primary contrast and the
calibration split: plan checks, the sweep's choice, the run matrix and the report (fake runners, no model)."""

from __future__ import annotations

import json

import pytest

from trl_loo_gspo.experiment.ablation.plan import AblationPlan
from trl_loo_gspo.experiment.ablation.runner import run_ablation

from .test_ablation_sweep import sweep_runner, write_plan

VARIANTS = [
    {"name": "full", "config": {"advantage_estimator": "loo", "dynamic_sampling": True}},
    {"name": "full-mean", "base": "full", "config": {"advantage_estimator": "group_mean"}},
    {"name": "full-k", "base": "full", "config": {"probe_generations": 2, "adaptive_group_size": True}},
    {"name": "full-k-mean", "base": "full-k", "config": {"advantage_estimator": "group_mean"}},
]

BEST = {"grpo": 1e-4, "full": 3e-4, "full-mean": 3e-4, "full-k": 3e-4, "full-k-mean": 3e-4}


def bases_plan(tmp_path, **overrides) -> AblationPlan:
    settings = dict(
        variants=VARIANTS,
        common={"per_device_train_batch_size": 8, "num_generations": 4},
        primary=["full", "grpo"],
        contrasts=[["full", "full-mean"], ["full-k", "full-k-mean"]],
    )
    return write_plan(tmp_path, **{**settings, **overrides})


def test_an_ablation_is_its_base_config_plus_its_own_fields_recursively(tmp_path):
    plan = bases_plan(tmp_path)
    configs = {name: cfg for name, cfg, _ in plan.entries()}
    assert configs["full-mean"] == {"advantage_estimator": "group_mean", "dynamic_sampling": True}
    assert configs["full-k-mean"] == {
        "advantage_estimator": "group_mean",
        "dynamic_sampling": True,
        "probe_generations": 2,
        "adaptive_group_size": True,
    }
    assert plan.bases() == {"full-mean": "full", "full-k": "full", "full-k-mean": "full"}  # roots


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ([{"name": "a", "base": "nope", "config": {}}], "base 'nope' is not another variant"),
        ([{"name": "a", "base": "a", "config": {}}], "base 'a' is not another variant"),
        (
            [{"name": "a", "base": "b", "config": {}}, {"name": "b", "base": "a", "config": {}}],
            "bases form a cycle",
        ),
    ],
)
def test_a_bad_base_fails_at_construction(tmp_path, variants, message):
    with pytest.raises(ValueError, match=message):
        write_plan(tmp_path, variants=variants)


def test_ablations_are_not_swept_and_train_at_their_roots_choice_then_the_common_rate(tmp_path):
    plan = bases_plan(tmp_path, common_rate=1e-4)
    calls: list = []
    records = run_ablation(plan, sweep_runner(calls, BEST))
    swept = {name for split, name, _, _ in calls if split == "tuning"}
    assert swept == {"grpo", "full"}  # 2 rates x 2 swept entries x 1 seed
    study = [(name, lr) for split, name, _, lr in calls if split == "validation"][: len(records)]
    rates = dict(study)
    assert rates == {"grpo": 1e-4, "full": 3e-4, "full-mean": 3e-4, "full-k": 3e-4, "full-k-mean": 3e-4}
    # the common rate: grpo chose it (its study records stand), full did not (trained again at 1e-4, 2 seeds);
    # ablations are not retrained (they share their root's rate in the study)
    common = [(name, seed, lr) for split, name, seed, lr in calls if split == "validation" and lr == 1e-4]
    assert sorted(common) == [("full", 0, 1e-4), ("full", 1, 1e-4), ("grpo", 0, 1e-4), ("grpo", 1, 1e-4)]
    assert json.loads((tmp_path / "out" / "common-rate" / "full" / "seed0.json").read_text())["seed"] == 0
    assert not (tmp_path / "out" / "common-rate" / "grpo").exists()
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Every variant at one common learning rate (0.0001, declared before the sweep)" in text
    assert "## Primary contrast (pre-registered, tested alone at the 5% level)" in text
    assert "## Component contrasts as one family of 2 (Holm-corrected)" in text
    assert "Single-field ablations are not swept" in text and "full-k-mean (full's lr 0.0003)" in text
    calls.clear()
    run_ablation(plan, sweep_runner(calls, BEST))
    assert calls == []  # resumable: every record (study and common rate) is reused


def test_a_worker_goes_on_to_the_common_rate_runs_while_another_finishes_the_study(tmp_path):
    """Before, a worker that found the study's last run claimed by another stopped there, leaving every common-rate
    run to that one worker (the chain study's common-rate phase ran on one worker of two)."""
    from .test_ablation_claims import _held_by_another_process

    plan = bases_plan(tmp_path, common_rate=1e-4)
    held = tmp_path / "out" / "runs" / "full-k-mean" / "seed1.json"
    holder = _held_by_another_process(held)
    calls: list = []
    try:
        assert run_ablation(plan, sweep_runner(calls, BEST)) is None  # the held run is still "being trained"
    finally:
        holder.kill()
        holder.wait()
    common = sorted((name, seed) for split, name, seed, lr in calls if split == "validation" and lr == 1e-4)
    assert ("full", 0) in common and ("full", 1) in common  # trained anyway
    assert ("full-k-mean", 1) not in [(name, seed) for _, name, seed, _ in calls]
    calls.clear()
    records = run_ablation(plan, sweep_runner(calls, BEST))
    assert [(name, seed) for _, name, seed, _ in calls] == [("full-k-mean", 1)] and records
    assert (tmp_path / "out" / "report.md").exists()


def test_the_worker_that_finishes_last_writes_the_report_though_it_left_the_study_unfinished(tmp_path):
    """Both workers of chain-study-2 returned without a report: each had left the study while the other held its
    last run, and each asked whether the study was complete before its common-rate runs, not after them."""
    from .test_ablation_claims import _held_by_another_process

    plan = bases_plan(tmp_path, common_rate=1e-4)
    held = tmp_path / "out" / "runs" / "full-k-mean" / "seed1.json"
    holder = _held_by_another_process(held)
    calls: list = []
    base = sweep_runner(calls, BEST)

    def runner(plan, name, overrides, is_baseline, seed, progress, split="validation", **_common_rate):
        record = base(plan, name, overrides, is_baseline, seed, progress, split)
        if (split, name, overrides["learning_rate"]) == ("validation", "full", 1e-4) and holder.poll() is None:
            # meanwhile the other worker finishes the study run it held, writes its record and exits
            other = sweep_runner([], BEST)(plan, "full-k-mean", {"learning_rate": 3e-4}, False, 1, None)
            held.write_text(json.dumps(other))
            holder.kill()
            holder.wait()
        return record

    try:
        records = run_ablation(plan, runner)
    finally:
        holder.kill()
        holder.wait()
    assert records is not None and (tmp_path / "out" / "report.md").exists()
    assert ("validation", "full-k-mean", 1, 3e-4) not in calls  # trained by the other worker only


def test_a_common_rate_run_trains_in_its_own_folder_not_in_the_study_runs(tmp_path):
    """Two workers may train ``runs/full/seed0`` and its common-rate twin at once: they must not share a trainer
    folder (a recipe's checkpoints would collide)."""
    from trl_loo_gspo.experiment.ablation.plan import demo_args, demo_task

    plan = bases_plan(tmp_path, common_rate=1e-4)
    base = sweep_runner([], BEST)
    folders: dict = {}

    def runner(plan, name, overrides, is_baseline, seed, progress, split="validation", **kwargs):
        folders[(name, overrides["learning_rate"], split, seed)] = kwargs.get("output_dir")
        return base(plan, name, overrides, is_baseline, seed, progress, split)

    assert run_ablation(plan, runner)
    assert folders[("full", 1e-4, "validation", 0)] == str(tmp_path / "out" / "common-rate" / "full" / "seed0")
    assert folders[("full", 3e-4, "validation", 0)] is None  # the study's run: the default folder
    assert folders[("grpo", 1e-4, "validation", 0)] is None  # grpo chose the common rate: its study run stands
    task = demo_task(plan, 0)[0]
    args = demo_args(plan, "full", {"learning_rate": 1e-4}, False, 0, task, output_dir=str(tmp_path / "elsewhere"))
    assert args.output_dir == str(tmp_path / "elsewhere")
    assert demo_args(plan, "full", {}, False, 0, task).output_dir == str(tmp_path / "out" / "runs" / "full" / "seed0")


def test_common_rate_runs_take_their_own_evaluation_spacing_and_the_study_runs_keep_theirs(tmp_path):
    """The common-rate comparison reads only the final point: with ``common_rate_eval_every_tokens`` its own runs
    evaluate at that spacing (their provenance says so), while a study run that stands for one keeps the study's."""
    from trl_loo_gspo.experiment.ablation.provenance import run_provenance

    plan = bases_plan(tmp_path, common_rate=1e-4, common_rate_eval_every_tokens=10**9)
    base = sweep_runner([], BEST)
    calls: list = []

    def runner(plan, name, overrides, is_baseline, seed, progress, split="validation", **kwargs):
        calls.append((name, seed, overrides["learning_rate"], split, kwargs.get("eval_every_tokens")))
        return base(plan, name, overrides, is_baseline, seed, progress, split)

    assert run_ablation(plan, runner)
    spacing = {(name, lr, split): every for name, _, lr, split, every in calls}
    assert spacing[("full", 1e-4, "validation")] == 10**9  # the common-rate runs of a variant that chose 3e-4
    assert spacing[("full", 3e-4, "validation")] is None  # the study's runs: the plan's eval_every_tokens
    assert spacing[("grpo", 1e-4, "validation")] is None  # grpo chose 1e-4: its study runs stand for both
    record = json.loads((tmp_path / "out" / "common-rate" / "full" / "seed0.json").read_text())
    overrides = {**dict((n, c) for n, c, _ in plan.entries())["full"], "learning_rate": 1e-4}
    expected = run_provenance(plan, "full", overrides, False, 0, "validation", eval_every_tokens=10**9)
    assert record["provenance"]["config_hash"] == expected["config_hash"]
    assert expected["config_hash"] != run_provenance(plan, "full", overrides, False, 0)["config_hash"]
    calls.clear()
    run_ablation(plan, runner)
    assert calls == []  # resumable: the records carry the spacing they were made with
    with pytest.raises(ValueError, match="common_rate_eval_every_tokens"):
        bases_plan(tmp_path, common_rate_eval_every_tokens=1000)  # without common_rate
    with pytest.raises(ValueError, match="common_rate_eval_every_tokens"):
        bases_plan(tmp_path, common_rate=1e-4, common_rate_eval_every_tokens=0)


def test_primary_and_eval_split_are_checked(tmp_path):
    with pytest.raises(ValueError, match="primary is one"):
        bases_plan(tmp_path, primary=["full", "missing"])
    with pytest.raises(ValueError, match="eval_split must be"):
        bases_plan(tmp_path, eval_split="test")
    with pytest.raises(ValueError, match="common_rate .* needs a sweep"):
        bases_plan(tmp_path, sweep={}, common_rate=1e-4)


def test_a_calibration_plan_scores_every_run_on_the_tuning_split(tmp_path):
    plan = write_plan(tmp_path, sweep={}, variants=[], common={"learning_rate": 2e-4}, eval_split="tuning")
    calls: list = []

    def runner(plan, name, overrides, is_baseline, seed, progress, split="validation"):
        calls.append(split)
        return sweep_runner([], {"grpo": 2e-4})(plan, name, {**overrides, "learning_rate": 2e-4}, is_baseline, seed,
                                                progress, split)  # fmt: skip

    records = run_ablation(plan, runner)
    assert calls == ["tuning", "tuning"] and {r["split"] for r in records} == {"tuning"}
    assert {
        json.loads(p.read_text())["provenance"]["config_hash"] for p in (tmp_path / "out" / "runs").rglob("*.json")
    }


def test_the_report_fits_compute_curves_and_says_where_a_ceiling_is_not_identified(tmp_path, monkeypatch):
    """Fake records with 9 evaluation points: a variant that saturates inside the budget gets a ceiling with an
    interval; one still rising linearly at the end gets 'n.i.', never a number; the figure is written."""
    import math

    from trl_loo_gspo.experiment.ablation import inference
    from trl_loo_gspo.experiment.ablation.report import write_outputs

    monkeypatch.setattr(inference, "CURVE_BOOTSTRAP", 40)  # (the report's 200 refits: same code, less time)
    plan = bases_plan(tmp_path, sweep={}, primary=None, contrasts=[], variants=[VARIANTS[0]])
    grid = [i * 125 for i in range(9)]  # 0 … 1000 tokens
    records = []
    for seed in range(4):
        wobble = 0.004 * (seed - 1.5)
        saturating = [(c, 0.3 + 0.3 / (1 + (250 / c) ** 2) + wobble if c else 0.3) for c in grid]
        linear = [(c, 0.3 + 0.0001 * c + wobble) for c in grid]
        for name, curve in (("grpo", saturating), ("full", linear)):
            final = curve[-1][1]
            records.append({"name": name, "seed": seed, "baseline": name == "grpo", "final_pass_rate": final,
                            "best_pass_rate": final, "final_pass_at_1": final, "auc": final, "curve": curve,
                            "generated_tokens": 1000, "effective_tokens": 500})  # fmt: skip
    write_outputs(plan, records)
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Compute–performance curves (ScaleRL's sigmoid)" in text
    grpo = next(line for line in text.splitlines() if line.startswith("| grpo |") and "[" in line)
    full = next(line for line in text.splitlines() if line.startswith("| full |") and ("n.i." in line))
    a = float(grpo.split("|")[3].split("[")[0])
    assert math.isclose(a, 0.6, abs_tol=0.02)
    assert "n.i." in full and "midpoint beyond the observed compute" in text
    assert (tmp_path / "out" / "compute_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_partial_study_reports_no_test_before_two_paired_seeds(tmp_path):
    from trl_loo_gspo.experiment.ablation.report import report

    plan = bases_plan(tmp_path, sweep={}, seeds=[0])
    records = [
        {
            "name": name,
            "seed": 0,
            "baseline": name == "grpo",
            "final_pass_rate": 0.5,
            "best_pass_rate": 0.5,
            "final_pass_at_1": 0.5,
            "auc": 0.5,
            "curve": [[0, 0.4], [1000, 0.5]],
            "generated_tokens": 1000,
            "effective_tokens": 500,
        }  # fmt: skip
        for name in ("grpo", "full", "full-mean", "full-k", "full-k-mean")
    ]
    text = report(plan, records)
    assert "No contrast has 2 paired seeds yet: no test." in text and "family of 0" not in text
    assert "full − grpo: fewer than 2 paired seeds." in text
