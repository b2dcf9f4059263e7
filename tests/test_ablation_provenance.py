"""Reproducible ablations: records carry their provenance, stale ones are refused, shipped plans write outside docs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from trl_loo_gspo.experiment.ablation.plan import AblationPlan, run_path
from trl_loo_gspo.experiment.ablation.provenance import StaleRecordsError, run_provenance, source_hash
from trl_loo_gspo.experiment.ablation.runner import run_ablation

from .test_ablation import fake_runner

REPO = Path(__file__).resolve().parent.parent


def _is_git_checkout(path: Path) -> bool:
    """Whether ``path`` is the top of a git checkout (not an export: ``git archive``, an sdist, a copy)."""
    try:
        top = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    except OSError:
        return False
    return top.returncode == 0 and Path(top.stdout.strip()).resolve() == path.resolve()


needs_checkout = pytest.mark.skipif(
    not _is_git_checkout(REPO),
    reason="asks git what the repository tracks: runs only in a git checkout, not an export",
)


def two_run_plan(tmp_path, **overrides) -> AblationPlan:
    data = dict(
        output_dir=str(tmp_path / "out"),
        seeds=[0],
        rollout_tokens=1000,
        baseline={"name": "grpo", "config": {}},
        variants=[{"name": "loo", "config": {}}],
    )
    data.update(overrides)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return AblationPlan.from_yaml(path)


def test_a_second_run_reuses_only_records_of_the_same_code_and_config(tmp_path):
    plan = two_run_plan(tmp_path)
    calls: list = []
    run_ablation(plan, fake_runner(calls, {}))
    assert calls == [("grpo", 0), ("loo", 0)]
    record = json.loads(run_path(plan, "loo", 0).read_text())
    assert record["provenance"] == run_provenance(plan, "loo", {}, False, 0)
    assert record["provenance"]["source_hash"] == source_hash() and record["provenance"]["config_hash"]
    calls.clear()
    run_ablation(plan, fake_runner(calls, {}))  # same code, same plan: both records reused
    assert calls == []

    changed = two_run_plan(tmp_path, common={"learning_rate": 3e-4})  # another config, same directory
    with pytest.raises(StaleRecordsError, match=r"(?s)2 run record\(s\).*grpo seed 0: another config.*--reuse-stale"):
        run_ablation(changed, fake_runner(calls, {}))
    assert calls == []  # refused before anything trained
    run_ablation(changed, fake_runner(calls, {}), reuse_stale=True)  # on purpose
    assert calls == []


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda p: p.update(source_hash="0" * 64, commit="abc123"), "other code"),
        (lambda p: p["libraries"].update(trl="0.0.1"), "other library versions"),
        (lambda p: p.clear(), "another config"),
    ],
    ids=["other commit", "other trl", "emptied"],
)
def test_a_record_from_other_code_is_refused_with_a_clear_message(tmp_path, edit, why):
    plan = two_run_plan(tmp_path)
    run_ablation(plan, fake_runner([], {}))
    path = run_path(plan, "loo", 0)
    record = json.loads(path.read_text())
    edit(record["provenance"])
    path.write_text(json.dumps(record))
    with pytest.raises(StaleRecordsError, match=f"loo seed 0: {why}"):
        run_ablation(plan, fake_runner([], {}))
    old = {k: v for k, v in record.items() if k != "provenance"}  # a record made before provenance existed
    path.write_text(json.dumps(old))
    with pytest.raises(StaleRecordsError, match="loo seed 0: no provenance"):
        run_ablation(plan, fake_runner([], {}))


def test_the_cli_refuses_stale_records_and_says_how_to_reuse_them(tmp_path, capsys):
    from trl_loo_gspo.cli.main import main

    plan = two_run_plan(tmp_path)
    run_ablation(plan, fake_runner([], {}))
    path = run_path(plan, "grpo", 0)
    record = json.loads(path.read_text())
    record["provenance"]["config_hash"] = "stale"
    path.write_text(json.dumps(record))
    assert main(["ablate", str(tmp_path / "plan.yaml")]) == 2
    error = capsys.readouterr().err
    assert "grpo seed 0: another config" in error and "--reuse-stale" in error


@needs_checkout
@pytest.mark.parametrize("plan_file", sorted((REPO / "recipes" / "ablations").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_plans_write_outside_docs_where_a_clean_clone_has_no_records(plan_file):
    data = yaml.safe_load(plan_file.read_text())
    out = Path(data["output_dir"])
    assert not out.is_absolute() and out.parts[0] != "docs"
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", str(out)], capture_output=True, text=True, check=True
    ).stdout
    assert tracked == ""  # nothing committed there: the README's command trains
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", str(out / "runs" / "x" / "seed0.json")])
    assert ignored.returncode == 0  # and what it writes is not picked up by `git add`


def test_the_report_shows_each_variants_overshoot_of_the_budget(tmp_path):
    from trl_loo_gspo.experiment.ablation.runner import report

    plan = two_run_plan(tmp_path)
    records = run_ablation(plan, fake_runner([], {}))
    records[1]["generated_tokens"] = 1046  # a variant that went 4.6% past the budget
    text = report(plan, records)
    assert "| gen. tokens | overshoot |" in text
    assert "| 1,000 | +0.0% |" in text and "| 1,046 | +4.6% |" in text  # (fake records: no steps, no rounds)
    for r in records:
        r["steps"] = 10  # one step per round: 100 tokens per round for the baseline
    text = report(plan, records)
    assert "| 1,000 | +0.0%, max 0.00 round |" in text and "| 1,046 | +4.6%, max 0.46 round |" in text
    assert "one round of the baseline: 100 generated tokens" in text
    assert "Every run of every variant stopped within one plain round of the budget." in text
    records[1]["generated_tokens"] = 1101
    assert "Past the budget by more than one plain round: loo." in report(plan, records)


def test_the_readmes_ablation_commands_name_shipped_plans_that_train_on_a_clean_clone():
    import re

    commands = re.findall(r"trl-loo-gspo ablate (recipes/ablations/[\w.-]+\.yaml)", (REPO / "README.md").read_text())
    assert "recipes/ablations/study.yaml" in commands
    for plan_file in set(commands):
        plan = AblationPlan.from_yaml(REPO / plan_file)  # loads and checks every run's config
        assert not plan.output_dir.startswith("docs")  # (and nothing is committed there: the test above)


def test_the_source_hash_covers_training_code_but_not_the_report_only_modules(tmp_path, monkeypatch):
    """A report can be rewritten from committed records after its code changes; any other edit makes them stale."""
    import shutil

    from trl_loo_gspo.experiment.ablation import provenance

    copy = tmp_path / "trl_loo_gspo"
    shutil.copytree(provenance.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "PACKAGE", copy)

    def fresh_hash() -> str:
        provenance.source_hash.cache_clear()
        return provenance.source_hash()

    try:
        before = fresh_hash()
        for module in provenance.REPORT_ONLY:
            assert (copy / module).is_file(), module  # the list names real modules
            (copy / module).write_text((copy / module).read_text() + "\n# edited\n")
        assert fresh_hash() == before
        runner = copy / "experiment" / "ablation" / "runner.py"
        runner.write_text(runner.read_text() + "\n# edited\n")
        assert fresh_hash() != before
    finally:
        provenance.source_hash.cache_clear()
