"""The report's declared secondary metrics (issue #47): what is read from a record, the no-training reference row,
and the paired statistics per metric with Holm within each family (hand-made records, golden values in float64)."""

from __future__ import annotations

import math

import pytest

from trl_loo_gspo.experiment.ablation.report import report
from trl_loo_gspo.experiment.ablation.secondaries import (
    WARM_START,
    contrast_tests,
    final_values,
    read_pass_at_k,
    secondaries,
    secondaries_section,
    warm_start_values,
)

from .ablation_records import new_record, old_record, plan

#: One record's #47 evaluation fields: 4 problems, 6 sampled answers each, strata 2, 2, 3, 3 (number of terms).
EVALUATION = {
    "start_pass_rate": 0.25,
    "start_pass_at_1": 0.5,
    "per_problem": {
        "samples": 6,
        "strata": [2, 2, 3, 3],
        "start": {"greedy": [1, 0, 1, 0], "successes": [0, 0, 3, 3]},
        "final": {"greedy": [1, 1, 1, 0], "successes": [0, 1, 6, 3]},
    },
    "pass_at_k": {"start": {"1": 0.25, "4": 0.5}, "final": {"1": 0.99, "4": 0.99}},  # (per_problem is read first)
    "by_stratum": {
        "start": {"2": {"greedy": 0.5, "sampled": 0.0}, "3": {"greedy": 0.5, "sampled": 0.5}},
        "final": {"2": {"greedy": 1.0, "sampled": 1 / 12}, "3": {"greedy": 0.5, "sampled": 0.75}},
    },
    "eval_entropy": {"start": 0.875, "final": 0.375},
}


def test_pass_at_k_is_computed_from_the_per_problem_counts_by_hand():
    record = {"final_pass_rate": 5 / 12, **EVALUATION}
    # final counts 0, 1, 6, 3 of 6: pass@1 = mean(c / 6) = (0 + 1/6 + 1 + 1/2) / 4 = 5/12
    assert read_pass_at_k(1, record, "final") == pytest.approx(5 / 12, abs=1e-15)
    # pass@4 = 1 − C(6−c, 4)/C(6, 4) per problem: 0, 1 − 5/15, 1, 1 − 0 → (0 + 2/3 + 1 + 1) / 4 = 2/3
    assert read_pass_at_k(4, record, "final") == pytest.approx(2 / 3, abs=1e-15)
    # start counts 0, 0, 3, 3: pass@4 = (0 + 0 + 1 + 1) / 4
    assert read_pass_at_k(4, record, "start") == pytest.approx(0.5, abs=1e-15)
    assert read_pass_at_k(16, record, "final") is None  # k > the 6 answers drawn
    # without counts, the record's own pass@k
    kept = {"pass_at_k": {"final": {"1": 0.3, "4": 0.6}, "start": None}}
    assert read_pass_at_k(4, kept, "final") == 0.6 and read_pass_at_k(16, kept, "final") is None
    assert read_pass_at_k(1, kept, "start") is None and read_pass_at_k(1, {}, "final") is None


def test_the_secondaries_are_those_the_records_keep_in_a_fixed_order():
    full = {"final_pass_rate": 5 / 12, "final_pass_at_1": 0.75, **EVALUATION}
    labels = [m.label for m in secondaries([full])]
    assert labels == [
        "greedy pass@1",
        "pass@4",  # (pass@1 from the counts would repeat the sampled pass rate)
        "entropy (nats/token)",
        "greedy, stratum 2",
        "sampled, stratum 2",
        "greedy, stratum 3",
        "sampled, stratum 3",
    ]
    assert [m.label for m in secondaries([full], "greedy")][0] == "sampled pass@1"  # the pass@1 that is not primary
    # a record made before #47 keeps only the final greedy pass@1; nothing else is listed
    assert [m.label for m in secondaries([old_record("a", 0, 0.4, 0.7)])] == ["greedy pass@1"]
    assert secondaries([old_record("a", 0, 0.4, 0.7)], "greedy")[0].label == "sampled pass@1"
    # strata in numeric order (10 after 9), and a NaN entropy is not a value
    ten = {"by_stratum": {"final": {"10": {"greedy": 1.0}, "9": {"greedy": 0.5}}}, "eval_entropy": {"final": math.nan}}
    assert [m.label for m in secondaries([ten])] == ["greedy, stratum 9", "greedy, stratum 10"]
    values = {m.label: m.read(full, "final") for m in secondaries([full])}
    assert values["entropy (nats/token)"] == 0.375 and values["sampled, stratum 2"] == 1 / 12


# Per seed, final greedy pass@1 (the secondary under a sampled primary); exact in binary.
GREEDY = {
    "grpo": [0.5, 0.5, 0.5],
    "full": [0.625, 0.75, 0.875],  # − grpo: 0.125, 0.25, 0.375
    "alt": [0.625, 0.375, 0.875],  # − grpo: 0.125, −0.125, 0.375
    "opt": [0.5, 0.625, 0.75],
}
#: The warm start's greedy pass@1 by seed.
START_GREEDY = {0: 0.75, 1: 0.5, 2: 1.0}


def study() -> dict[str, dict[int, dict]]:
    return {
        name: {
            seed: new_record(name, seed, 0.3, value, start=(0.25, START_GREEDY[seed]), eval_entropy={"final": 0.5})
            for seed, value in enumerate(values)
        }
        for name, values in GREEDY.items()
    }


def test_paired_tests_per_metric_with_holm_within_each_family_by_hand():
    greedy = next(m for m in secondaries([r for runs in study().values() for r in runs.values()]))
    assert greedy.label == "greedy pass@1"
    assert final_values(study()["full"], greedy) == {0: 0.625, 1: 0.75, 2: 0.875}
    families = [("components", [["full", "grpo"], ["alt", "grpo"]]), ("options", [["opt", "grpo"]])]
    tests = contrast_tests(study(), greedy, ["full", "grpo"], families)
    assert [(c.name, c.family) for c in tests] == [
        ("full − grpo", "primary"),
        ("full − grpo", "components"),
        ("alt − grpo", "components"),
        ("opt − grpo", "options"),
    ]
    primary, full, alt, opt = tests
    # 0.125, 0.25, 0.375: mean 0.25, sd 0.125, t = 0.25 / (0.125/√3) = 2√3; Student's t with 2 df has
    # P(|T| ≥ t) = 1 − t/√(2 + t²) = 1 − √(12/14); the 95% quantile with 2 df is 0.95/√(2·0.975·0.025)
    assert primary.test.mean == 0.25
    assert primary.test.t_p == pytest.approx(1 - math.sqrt(6 / 7), rel=1e-9)
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * 0.125 / math.sqrt(3)
    assert (primary.test.low, primary.test.high) == pytest.approx((0.25 - half, 0.25 + half), rel=1e-9)
    assert primary.test.sign_flip_p == 2 / 8  # all three positive: 2 of the 8 sign assignments as extreme
    assert math.isnan(primary.t_holm)  # the primary is tested alone
    # alt: 0.125, −0.125, 0.375: mean 0.125, sd 0.25, t = √3/2: p = 1 − √(0.75/2.75); |sum| ≥ 0.375 in 6 of 8
    assert alt.test.t_p == pytest.approx(1 - math.sqrt(3 / 11), rel=1e-9)
    assert alt.test.sign_flip_p == 6 / 8
    # Holm over the 2 components: the smaller p doubled, the larger as it is (not below the first)
    assert full.t_holm == pytest.approx(2 * (1 - math.sqrt(6 / 7)), rel=1e-9)
    assert alt.t_holm == pytest.approx(1 - math.sqrt(3 / 11), rel=1e-9)
    assert (full.sign_flip_holm, alt.sign_flip_holm) == (0.5, 0.75)
    # the option family is corrected on its own: a family of one keeps its p (0, 0.125, 0.25: |sum| ≥ 0.375 for
    # both signs of 0 with + + and − −, 4 of 8)
    assert opt.t_holm == opt.test.t_p and opt.sign_flip_holm == opt.test.sign_flip_p == 0.5
    # the entropy only at the end: the same tests, differences 0
    entropy = next(
        m for m in secondaries([r for runs in study().values() for r in runs.values()]) if "entropy" in m.label
    )
    assert contrast_tests(study(), entropy, ["full", "grpo"], [])[0].test.mean == 0.0


def test_the_section_puts_the_warm_start_first_and_skips_what_no_record_keeps():
    lines = secondaries_section(
        plan(
            primary=["full", "grpo"], contrasts=[["full", "grpo"], ["alt", "grpo"]], option_contrasts=[["opt", "grpo"]]
        ),
        study(),
    )
    text = "\n".join(lines)
    assert lines[1] == "## Secondary metrics (declared; means over seeds)"
    table = text.split("| variant | greedy pass@1 | entropy (nats/token) |")[1].splitlines()
    assert table[2] == f"| {WARM_START} | 0.750 | — |"  # (0.75 + 0.5 + 1.0) / 3; no record keeps a start entropy
    assert table[3] == "| grpo | 0.500 | 0.500 |"
    assert table[4] == "| full | 0.750 | 0.500 |"
    assert "### pass@" not in text and "### greedy, stratum" not in text  # not kept: left out silently
    greedy = text.split("### greedy pass@1")[1].split("###")[0]
    # 0.25 ± 0.3105212 (the interval computed in the test above), p = 1 − √(6/7) = 0.0742
    assert "| full − grpo | primary | 3 | +0.250 | [-0.061, +0.561] | 0.074 | alone | 0.250 | alone |" in greedy
    assert "| alt − grpo | components | 3 | +0.125 |" in greedy and "| 0.750 | 0.750 |" in greedy
    assert "| opt − grpo | options | 3 |" in greedy
    assert "Holm's correction within each family for each metric separately" in text
    assert warm_start_values(study(), secondaries([study()["full"][0]])[0]) == START_GREEDY


def test_the_report_has_the_section_on_new_records_and_on_old_records_only_what_they_keep():
    text = report(plan(primary=["full", "grpo"]), [r for runs in study().values() for r in runs.values()])
    assert "## Secondary metrics (declared; means over seeds)" in text
    assert text.index("## Primary contrast") < text.index("## Secondary metrics")
    old = [old_record(name, seed, 0.3, value) for name, values in GREEDY.items() for seed, value in enumerate(values)]
    section = "\n".join(secondaries_section(plan(primary=["full", "grpo"]), _by_name(old)))
    assert "| variant | greedy pass@1 |" in section and WARM_START not in section
    # a greedy primary on old records: the sampled pass rate is the secondary
    greedy = "\n".join(secondaries_section(plan(primary_metric="greedy"), _by_name(old)))
    assert "| variant | sampled pass@1 |" in greedy and "| full | 0.300 |" in greedy
    assert "Paired differences" not in greedy  # no primary, no family: the table alone
    assert secondaries_section(plan(), {"a": {0: {"name": "a", "seed": 0}}}) == []


def _by_name(rows: list[dict]) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for r in rows:
        out.setdefault(r["name"], {})[r["seed"]] = r
    return out


def test_records_as_the_runner_writes_them_fill_every_secondary_and_the_reference_row():
    """Records from :func:`.evaluation.evaluation_record` (the runner's own fields): the schema the report reads."""
    from trl_loo_gspo.experiment.ablation.evaluation import evaluation_record

    start = {"greedy": [1, 0, 0, 1], "successes": [4, 0, 1, 2], "samples": 4}

    def point(tokens: float, detail: dict, entropy: float) -> dict:
        greedy, counts = detail["greedy"], detail["successes"]
        return {
            "rollout_tokens": tokens,
            "eval/pass_at_1": sum(greedy) / len(greedy),
            "eval/pass_rate": sum(counts) / (4 * len(counts)),
            "eval/entropy": entropy,
        }

    rows = []
    for name, final in (("grpo", [4, 1, 4, 0]), ("full", [4, 2, 4, 1])):
        for seed in range(3):
            end = {"greedy": [1, 1, 1, seed % 2], "successes": final, "samples": 4}
            history = [point(0, start, 1.25), point(1000, end, 0.75 if name == "grpo" else 0.5)]
            fields = evaluation_record(history, [start, end], [2, 3, 2, 3], budget=1000)
            rows.append({"name": name, "seed": seed, "baseline": name == "grpo", "generated_tokens": 1000, **fields})
    text = report(plan(primary=["full", "grpo"], primary_metric="greedy"), rows)
    header = (
        "| variant | sampled pass@1 | pass@4 | entropy (nats/token) | greedy, stratum 2 | sampled, stratum 2 "
        "| greedy, stratum 3 | sampled, stratum 3 |"
    )
    table = text.split(header)[1].splitlines()
    # the warm start: sampled 7/16, pass@4 3/4 (c > 0 in 3 of 4), entropy 1.25; strata 2 (problems 0, 2) and 3
    assert table[2] == f"| {WARM_START} | 0.438 | 0.750 | 1.250 | 0.500 | 0.625 | 0.500 | 0.250 |"
    # full at the end: counts 4, 2, 4, 1 of 4 → 11/16; pass@4 1; greedy in stratum 3: (1 + seed % 2) / 2 → 2/3
    assert table[4] == "| full | 0.688 | 1.000 | 0.500 | 1.000 | 1.000 | 0.667 | 0.375 |"
    # and the primary results table starts from the warm start's greedy pass@1, 2/4
    assert "| warm start (no training) | 3 | 0.500 | — |" in text
    entropy = text.split("### entropy (nats/token)")[1].split("###")[0]
    assert "| full − grpo | primary | 3 | -0.250 | [-0.250, -0.250] | 0.0000 | alone |" in entropy
