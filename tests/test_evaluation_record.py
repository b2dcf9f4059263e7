"""What a run record keeps of its evaluations (trl_loo_gspo.experiment.ablation.evaluation): curves, the warm
start's figures, per-problem results, pass@k and pass rates by stratum, from hand-made evaluations."""

from __future__ import annotations

import math

import pytest

from trl_loo_gspo.experiment.ablation.evaluation import by_stratum, evaluation_record, pass_at_ks
from trl_loo_gspo.trainer.validation import problem_order, rank_share


def _point(tokens: float, greedy: float, sampled: float, entropy: float = math.nan) -> dict:
    return {"rollout_tokens": tokens, "eval/pass_at_1": greedy, "eval/pass_rate": sampled, "eval/entropy": entropy}


START = {"greedy": [1, 0, 0, 1], "successes": [4, 0, 1, 2], "samples": 4, "entropy": [10.0, 8.0]}
MIDDLE = {"greedy": [1, 1, 0, 1], "successes": None, "samples": 0, "entropy": None}
FINAL = {"greedy": [1, 1, 1, 0], "successes": [4, 1, 4, 0], "samples": 4, "entropy": [6.0, 8.0]}


def test_record_from_a_start_a_greedy_only_middle_and_a_final_point():
    history = [_point(0, 0.5, 7 / 16, 1.25), _point(50, 0.75, math.nan), _point(100, 0.75, 9 / 16, 0.75)]
    record = evaluation_record(history, [START, MIDDLE, FINAL], [2, 3, 2, 3], budget=100)
    assert record["curve"] == [(0, 7 / 16), (100, 9 / 16)]  # the sampled curve: points that drew answers
    assert record["greedy_curve"] == [(0, 0.5), (50, 0.75), (100, 0.75)]
    assert record["final_pass_rate"] == 9 / 16 and record["final_pass_at_1"] == 0.75
    assert record["start_pass_rate"] == 7 / 16 and record["start_pass_at_1"] == 0.5
    assert record["best_pass_rate"] == 9 / 16
    assert record["auc"] == pytest.approx((7 / 16 + 9 / 16) / 2)
    assert record["greedy_auc"] == pytest.approx((0.5 + 0.75) / 4 + 0.75 / 2)  # trapezoids on [0, 50], [50, 100]
    assert record["per_problem"] == {
        "samples": 4,
        "strata": [2, 3, 2, 3],
        "start": {"greedy": [1, 0, 0, 1], "successes": [4, 0, 1, 2]},
        "final": {"greedy": [1, 1, 1, 0], "successes": [4, 1, 4, 0]},
    }
    # pass@4 of c successes out of 4: 1 if c > 0; pass@1 = c / 4
    assert record["pass_at_k"]["start"] == {"1": pytest.approx(7 / 16), "4": pytest.approx(3 / 4)}
    assert record["pass_at_k"]["final"] == {"1": pytest.approx(9 / 16), "4": pytest.approx(3 / 4)}
    assert record["eval_entropy"] == {"start": 1.25, "final": 0.75}
    assert record["by_stratum"]["final"] == {
        "2": {"problems": 2, "greedy": 1.0, "sampled": 1.0},
        "3": {"problems": 2, "greedy": 0.5, "sampled": 1 / 8},
    }


def test_a_run_without_a_start_point_has_no_warm_start_figures():
    record = evaluation_record([_point(100, 0.75, 9 / 16)], [FINAL], None, budget=100)
    assert record["start_pass_at_1"] is None and record["start_pass_rate"] is None
    assert record["per_problem"]["start"] is None and record["pass_at_k"]["start"] is None
    assert record["by_stratum"] == {"start": None, "final": None}


def test_pass_at_k_keeps_only_the_ks_the_samples_allow():
    counts = {"greedy": [0, 1], "successes": [1, 16], "samples": 16}
    got = pass_at_ks(counts)
    assert set(got) == {"1", "4", "16"}
    assert got["16"] == pytest.approx(1.0) and got["4"] == pytest.approx((4 / 16 + 1) / 2)
    assert set(pass_at_ks({**counts, "successes": [1, 2], "samples": 2})) == {"1"}
    assert pass_at_ks(MIDDLE) is None


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="one detail per evaluation"):
        evaluation_record([_point(0, 0.5, 0.5)], [], None, budget=10)
    with pytest.raises(ValueError, match="3 labels for 4 problems"):
        by_stratum(FINAL, [2, 3, 2])


@pytest.mark.parametrize("world", [1, 2, 3])
def test_problem_order_reassembles_each_processs_share(world):
    indices = [
        rank_share(7, rank, world, pad=True)[0][: rank_share(7, rank, world, pad=True)[1]] for rank in range(world)
    ]
    shares = [[f"p{i}" for i in index] for index in indices]
    assert problem_order(shares, indices, 7) == [f"p{i}" for i in range(7)]
    assert problem_order(shares[:1], indices[:1], 7)[1:world] == [None] * (world - 1)  # a missing share stays None
