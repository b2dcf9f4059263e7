"""The plan's declared primary metric and its second family of contrasts (issue #47): the checks, and the report's
sections reading the declared metric (fake records, no model)."""

from __future__ import annotations

import math

import pytest

from trl_loo_gspo.experiment.ablation.inference import METRICS, areas, curves_by_seed, finals, warm_start
from trl_loo_gspo.experiment.ablation.report import report

from .ablation_records import new_record, old_record, plan

# Per seed: (sampled, greedy) final values. Sampled says full > grpo, greedy says full < grpo.
FINALS = {
    "grpo": [(0.30, 0.800), (0.32, 0.750), (0.34, 0.775)],
    "full": [(0.40, 0.700), (0.41, 0.650), (0.44, 0.700)],
    "alt": [(0.35, 0.825), (0.30, 0.800), (0.36, 0.750)],
    "opt": [(0.31, 0.900), (0.33, 0.875), (0.35, 0.850)],
}
#: The warm start's (sampled, greedy) by seed: the same for every variant of a seed.
START = {0: (0.25, 0.75), 1: (0.5, 0.5), 2: (0.0, 1.0)}


def records(make=new_record) -> list[dict]:
    return [
        make(name, seed, sampled, greedy, **({"start": START[seed]} if make is new_record else {}))
        for name, values in FINALS.items()
        for seed, (sampled, greedy) in enumerate(values)
    ]


def by_name(rows: list[dict]) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for r in rows:
        out.setdefault(r["name"], {})[r["seed"]] = r
    return out


def row(text: str, start: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"primary_metric": "pass@1"}, "primary_metric must be 'sampled' or 'greedy', got 'pass@1'"),
        ({"option_contrasts": [["full", "nope"]]}, "option_contrasts entries are .* got \\['full', 'nope'\\]"),
        ({"option_contrasts": [["full"]]}, "option_contrasts entries"),
    ],
)
def test_the_new_plan_fields_are_checked_naming_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        plan(**change)
    assert plan(primary_metric="greedy", option_contrasts=[["opt", "full"]]).primary_metric == "greedy"
    assert plan().primary_metric == "sampled" and plan().option_contrasts == []


def test_one_helper_picks_each_metrics_fields():
    runs = by_name(records())["full"]
    assert finals(runs) == {0: 0.40, 1: 0.41, 2: 0.44}
    assert finals(runs, "greedy") == {0: 0.700, 1: 0.650, 2: 0.700}
    assert curves_by_seed(runs, "greedy")[1] == [(0.0, 0.5), (500.0, 0.575), (1000.0, 0.65)]
    assert curves_by_seed(runs)[1] == [(0.0, 0.2), (1000.0, 0.41)]
    assert areas(runs, "greedy", 1000) == {0: 0.35, 1: 0.325, 2: 0.35}  # the records' greedy_auc
    old = by_name(records(old_record))["full"]
    assert curves_by_seed(old, "greedy") == {} and areas(old, "greedy", 1000) == {}  # (no greedy curve kept)
    # without a kept greedy_auc: the greedy curve's trapezoids over [0, 500] and [500, 1000], over the budget 1000
    bare = {0: {**runs[0], "greedy_auc": None}}
    assert areas(bare, "greedy", 1000) == {0: pytest.approx((0.75 + 0.725) / 4 + (0.725 + 0.7) / 4)}
    assert warm_start(by_name(records()), METRICS["greedy"].start) == {0: 0.75, 1: 0.5, 2: 1.0}
    assert warm_start(by_name(records(old_record)), METRICS["greedy"].start) == {}


def test_a_greedy_primary_is_read_by_every_section_and_the_warm_start_row_comes_first():
    rows = records()
    text = report(plan(primary=["full", "grpo"], contrasts=[["alt", "grpo"]], primary_metric="greedy"), rows)
    assert "Primary metric (declared in the plan: `primary_metric: greedy`): final greedy pass@1" in text
    table = text.split("| variant | n | greedy pass@1 | Δ vs baseline |")[1].splitlines()
    assert table[2].startswith("| warm start (no training) | 3 | 0.750 |")  # (0.75 + 0.5 + 1.0) / 3
    assert table[3].startswith("| grpo (baseline) | 3 | 0.775 |")  # (0.8 + 0.75 + 0.775) / 3
    # full − grpo on greedy: −0.1, −0.1, −0.075 (on the sampled rate it would be +0.1, +0.09, +0.1)
    primary = row(text, "| full − grpo | 3 |")
    assert "Δ greedy pass@1" in text.split("## Primary contrast")[1].splitlines()[2]
    assert primary[2] == f"{(-0.1 - 0.1 - 0.075) / 3:+.3f}" == "-0.092"
    assert row(text, "| full | 3 |")[3] == "-0.092"  # the table's Δ vs baseline reads the same metric
    # Δ AUC from the greedy curve areas (greedy_auc = greedy / 2): −0.0458
    assert row(text, "| full | 3 |")[5] == f"{(-0.1 - 0.1 - 0.075) / 6:+.3f}"
    family = text.split("## Component contrasts as one family of 1 (Holm-corrected)")[1]
    assert "| contrast | n | Δ greedy pass@1 | raw 95% CI |" in family
    assert row(family, "| alt − grpo |")[2] == f"{(0.025 + 0.05 - 0.025) / 3:+.3f}"


def test_the_sampled_default_reads_the_sampled_fields_and_its_warm_start():
    text = report(plan(primary=["full", "grpo"]), records())
    assert "Primary metric: final sampled pass rate on the held-out validation split" in text
    table = text.split("| variant | n | final pass rate | Δ vs baseline |")[1].splitlines()
    assert table[2].startswith("| warm start (no training) | 3 | 0.250 |")  # (0.25 + 0.5 + 0.0) / 3
    assert row(text, "| full − grpo | 3 |")[2] == f"{(0.1 + 0.09 + 0.1) / 3:+.3f}"


def test_records_made_before_47_give_todays_report_without_a_warm_start_row():
    text = report(plan(primary=["full", "grpo"], contrasts=[["full", "alt"], ["alt", "grpo"]]), records(old_record))
    assert "warm start" not in text.split("## Primary contrast")[0]
    assert "## Contrasts between variants (a − b, paired by seed)" in text
    assert "## Component contrasts as one family of 2 (Holm-corrected)" in text
    assert "Family 1" not in text and "Option contrasts" not in text
    # a greedy primary on them: the final greedy pass@1 is kept, the greedy curve is not — no fit, no failure
    greedy = report(plan(primary=["full", "grpo"], primary_metric="greedy"), records(old_record))
    assert row(greedy, "| full − grpo | 3 |")[2] == "-0.092" and "## Compute–performance curves" not in greedy


def test_the_option_family_is_its_own_holm_family():
    contrasts = [["full", "grpo"], ["alt", "grpo"]]
    text = report(plan(contrasts=contrasts, option_contrasts=[["full", "grpo"]]), records())
    first = text.split("## Family 1 — component contrasts as one family of 2 (Holm-corrected)")[1]
    second = text.split("## Family 2 — option contrasts as one family of 1 (Holm-corrected)")[1]
    first = first.split("## Family 2")[0]
    raw_p, holm_in_two = (float(c) for c in row(first, "| full − grpo |")[4:6])
    assert raw_p < 0.01
    raw_alone, holm_alone = (float(c) for c in row(second, "| full − grpo |")[4:6])
    assert raw_alone == raw_p and holm_alone == raw_p  # a family of one: Holm leaves p as it is
    assert holm_in_two == pytest.approx(min(1.0, 2 * raw_p), abs=1e-4)  # corrected within its own family of 2
    assert "## Family 1 — component contrasts between variants (a − b, paired by seed)" in text
    assert "## Family 2 — option contrasts between variants (a − b, paired by seed)" in text
    only = report(plan(option_contrasts=[["full", "grpo"]]), records())
    assert "## Option contrasts as one family of 1 (Holm-corrected)" in only
    assert "## Option contrasts between variants" in only and "Component" not in only


def test_the_common_rate_section_reads_the_declared_metric():
    common = records()
    study = plan(
        primary=["full", "grpo"],
        primary_metric="greedy",
        option_contrasts=[["opt", "grpo"]],
        task="demo-mixed",
        task_options={"max_terms": 2, "train_per_terms": 60, "validation_per_terms": 20, "tuning_per_terms": 20},
        sweep={"learning_rates": [1e-4, 3e-4], "seeds": [7]},
        common_rate=1e-4,
    )
    text = report(study, records(), [], common)
    section = text.split("## Every variant at one common learning rate")[1].split("\n## ")[0]
    assert "| variant | n | greedy pass@1 | Δ vs baseline |" in section
    assert row(section, "| grpo (baseline) |")[2] == "0.775"
    assert row(section, "| opt − grpo |")[2] == f"{(0.1 + 0.125 + 0.075) / 3:+.3f}"  # the option family too


def test_finals_leave_out_a_seed_without_the_metric():
    runs = {0: {"final_pass_rate": 0.5}, 1: {"final_pass_rate": 0.25, "final_pass_at_1": 0.75}}
    assert finals(runs) == {0: 0.5, 1: 0.25} and finals(runs, "greedy") == {1: 0.75}
    assert math.isnan(finals({0: {"final_pass_rate": math.nan}})[0])  # kept as before: a NaN run is visible


def test_write_outputs_with_a_greedy_primary_plots_the_greedy_curves(tmp_path, monkeypatch):
    from trl_loo_gspo.experiment.ablation import report as report_module

    plotted: list = []
    real_plot = report_module.plot

    def spy(rows, path, metric="sampled"):
        plotted.append(metric)
        real_plot(rows, path, metric)

    monkeypatch.setattr(report_module, "plot", spy)
    study = plan(output_dir=str(tmp_path), primary=["full", "grpo"], primary_metric="greedy")
    written = report_module.write_outputs(study, records())
    assert plotted == ["greedy"] and [p.name for p in written] == [
        "results.csv",
        "report.md",
        "pass_rate_vs_tokens.png",
    ]
    assert (tmp_path / "pass_rate_vs_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| warm start (no training) | 3 | 0.750 |" in (tmp_path / "report.md").read_text()
