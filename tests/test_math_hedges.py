"""Final answers math-verify reads only one side of (issue 33): chains and approximations against a gold relation,
alternatives joined by set or logical operators, a pipe, ``&`` or "or"; and nested boxes are one answer."""

from __future__ import annotations

import pytest

from trl_loo_gspo.verifiers import MathVerifier


@pytest.fixture(scope="module")
def verifier():
    return MathVerifier()


REFUSED = [  # (completion, gold): each scored 1.0 before
    ("$\\boxed{x = 4 = 3}$", "x = 3"),
    ("$\\boxed{x = 3 \\approx 4}$", "x = 3"),
    ("$\\boxed{x \\approx 3}$", "x = 3"),
    ("$\\boxed{3 \\cup 4}$", "4"),
    ("$\\boxed{3 \\cap 4}$", "4"),
    ("$\\boxed{3 \\vee 4}$", "4"),
    ("$\\boxed{3 \\wedge 4}$", "4"),
    ("$\\boxed{3 \\,|\\, 4}$", "4"),
    ("$\\boxed{3 \\ \\&\\ 4}$", "4"),
    ("$\\boxed{3 \\text{ (or 4)}}$", "3"),
    # found by the review: more operators math-verify reads one operand of
    ("$\\boxed{3 \\vert 4}$", "4"),
    ("$\\boxed{3\\vert 4}$", "4"),
    ("$\\boxed{3|4}$", "4"),
    ("$\\boxed{3 \\mid 4}$", "4"),
    ("$\\boxed{3 \\setminus 4}$", "4"),
]
KEPT = [  # (completion, gold, score): still compared by math-verify
    ("$\\boxed{x = 3}$", "x = 3", 1.0),
    ("$\\boxed{x = 3 \\text{ or } x = 4}$", "\\{3, 4\\}", 1.0),  # a list gold may be written with "or"
    ("$\\boxed{(-\\infty, 2) \\cup (3, \\infty)}$", "(-\\infty, 2) \\cup (3, \\infty)", 1.0),
    ("$\\boxed{|x - 1|}$", "|x-1|", 1.0),  # an absolute value is not a pipe between alternatives
    ("$\\boxed{\\vert x - 1 \\vert}$", "|x-1|", 1.0),
    ("$\\boxed{|x-1| + 2}$", "2+|x-1|", 1.0),
    ("$\\boxed{\\{x \\mid x > 2\\}}$", "\\{x \\mid x > 2\\}", 1.0),
    ("$\\boxed{3 \\approx 3.0}$", "3 \\approx 3", 1.0),
    ("$\\boxed{x \\geq 2}$", "x \\ge 2", 1.0),
    ("$\\boxed{5 \\text{ hours}}$", "5", 1.0),
]


@pytest.mark.parametrize(("completion", "gold"), REFUSED)
def test_answers_read_on_one_side_score_0(verifier, completion, gold):
    result = verifier.verify(completion, answer=gold)
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", None), result.details
    assert "gold answer" in result.details["refused"]


@pytest.mark.parametrize(("completion", "gold", "score"), KEPT)
def test_answers_without_a_hedge_are_compared_as_before(verifier, completion, gold, score):
    result = verifier.verify(completion, answer=gold)
    assert result.score == score and "refused" not in result.details, result.details


def test_only_outermost_boxes_count_as_answers_for_hedging():
    assert MathVerifier.hack_score("so $\\boxed{\\boxed{3}}$") == 0.0  # one answer, boxed twice
    assert MathVerifier.hack_score("$\\boxed{\\boxed{2} + \\boxed{3}}$") == 1.0  # two answers in one box
    assert MathVerifier.hack_score("$\\boxed{2}$ or $\\boxed{\\boxed{3}}$") == 1.0  # two distinct answers
