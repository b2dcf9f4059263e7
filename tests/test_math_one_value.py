"""A final answer holding several candidate values is never right (issue 45): math-verify read one of the values of
``\\boxed{3 \\\\ 4}``, ``\\boxed{3 \\oplus 4}``, ``cases``, ``3 \\text{ (maybe 4)}``, ``\\boxed{4 \\boxed{3}}`` or
``#### 3 or 4``, so each scored 1.0 for one of the golds 3 and 4 (a lottery). Several values read whole compare as a
set (never equal to one value); two right answers math-verify misread score 1."""

from __future__ import annotations

import pytest

from trl_loo_gspo.verifiers import MathVerifier

pytest.importorskip("math_verify")


@pytest.fixture(scope="module")
def verifier():
    return MathVerifier()


def scores(verifier, completion, golds=("3", "4")):
    return [verifier.verify(completion, answer=gold).score for gold in golds]


# The reviewer's forms: each scored 1.0 for one of the golds 3 and 4 before.
REVIEWED = [
    "$\\boxed{3 \\\\ 4}$",
    "$\\boxed{3 \\parallel 4}$",
    "$\\boxed{3 \\| 4}$",
    "$\\boxed{3 \\oplus 4}$",
    "$\\boxed{3 \\vdots 4}$",
    "$\\boxed{3 \\ddots 4}$",
    "$\\boxed{3 \\atop 4}$",
    "$\\boxed{3 \\colon 4}$",
    "$\\boxed{3 \\hspace{1cm} 4}$",
    "$\\boxed{\\begin{cases} 3 \\\\ 4 \\end{cases}}$",
    "$\\boxed{\\begin{aligned} 3 \\\\ 4 \\end{aligned}}$",
    "$\\boxed{3 \\text{ (maybe 4)}}$",
    "Adding them up.\n#### 3 or 4",
    "Adding them up.\n#### 3, 4",
    "$\\boxed{4 \\boxed{3}}$",
]


@pytest.mark.parametrize("completion", REVIEWED)
def test_an_answer_holding_two_values_scores_for_neither(verifier, completion):
    for gold in ("3", "4"):
        result = verifier.verify(completion, answer=gold)
        assert (result.score, result.status) == (0.0, "fail"), (gold, result.details)


# Found while fixing them: more separators math-verify cannot convert (it then read the 4 of another match), text it
# drops, inner boxes, anchored answers without a box, #### lines. Each scored 1.0 for the gold 3 or 4 before.
SEPARATORS = [
    "~",
    "\\text{, }",
    *"\\dots \\\\[2pt] \\cr \\otimes \\odot \\circ \\bullet \\star \\ast \\dagger \\diamond \\uplus".split(),
    *"\\amalg \\wr \\S \\# ? @ \\backslash \\lvert \\rvert \\Vert \\nmid \\perp \\in \\notin".split(),
    *"\\subset \\supset \\subseteq \\ni \\vdash \\top \\bot \\emptyset \\forall \\exists".split(),
    *"\\therefore \\because \\bigvee \\bigoplus \\prod \\sum \\partial \\kern1em \\mkern3mu".split(),
    *"\\enspace \\nobreakspace \\space \\textstyle \\left. \\right. \\textbar \\textbullet".split(),
    *"\\textemdash \\leftrightarrow \\Leftarrow \\uparrow \\downarrow \\choose \\brack \\brace".split(),
    "\\bmod",
]
MORE = [f"$\\boxed{{3 {separator} 4}}$" for separator in SEPARATORS] + [
    "$\\boxed{\\begin{gathered} 3 \\\\ 4 \\end{gathered}}$",
    "$\\boxed{\\begin{split} 3 \\\\ 4 \\end{split}}$",
    "$\\boxed{\\begin{align} 3 \\\\ 4 \\end{align}}$",
    "$\\boxed{\\begin{gather} 3 \\\\ 4 \\end{gather}}$",
    "$\\boxed{\\begin{smallmatrix} 3 \\\\ 4 \\end{smallmatrix}}$",
    "$\\boxed{\\substack{3 \\\\ 4}}$",
    "$\\boxed{3 \\text{ (4?)}}$",
    "$\\boxed{3 \\text{ possibly 4}}$",
    "$\\boxed{\\boxed{3} 4}$",
    "$\\boxed{4 \\fbox{3}}$",
    "$\\boxed{3 \\fbox{4}}$",
    "$\\fbox{3 \\oplus 4}$",
    "The final answer is $3 \\oplus 4$",
    "The answer is $3 \\\\ 4$.",
    "#### 3 4",
    "#### 3; 4",
    "#### 3 and 4",
    "#### 3 (or 4)",
    "#### 3 maybe 4",
    "#### {3, 4}",
    "#### 3 or 4\nThat is all.",
    "Some work with 7 and 9.\n#### The answer is 3 or 4",
]


@pytest.mark.parametrize("completion", MORE)
def test_no_other_form_of_two_values_is_a_lottery(verifier, completion):
    assert scores(verifier, completion) == [0.0, 0.0]


def test_a_value_hidden_in_dropped_text_or_several_boxes_is_refused(verifier):
    hours = verifier.verify("$\\boxed{6 \\text{ hours } 30 \\text{ minutes}}$", answer="6")  # read as 6 before
    assert hours.score == 0.0 and "as a unit" in hours.details["refused"]
    hedge = verifier.verify("$\\boxed{3 \\text{ or so}}$", answer="3")  # "or" in dropped text, as before
    assert hedge.score == 0.0 and "refused" in hedge.details
    nested = verifier.verify("$\\boxed{\\boxed{2} + \\boxed{3}}$", answer="3")
    assert nested.score == 0.0 and "box" in nested.details["refused"]
    line = verifier.verify("We need 7.\n#### 3 or 4", answer="4")
    assert line.score == 0.0 and "####" in line.details["refused"]


def test_an_unconverted_final_answer_is_compared_as_text_not_by_another_match(verifier):
    # math-verify cannot convert set-builder notation: it read the 2 of both, so any such answer equalled the gold
    gold = "\\{x \\mid x > 2\\}"
    assert verifier.verify("$\\boxed{\\{x \\mid x > 2\\}}$", answer=gold).score == 1.0  # the same text
    assert verifier.verify("$\\boxed{\\{x \\mid x < 2\\}}$", answer=gold).score == 0.0  # scored 1.0 before
    assert verifier.verify("$\\boxed{3 \\oplus 4}$", answer="3 \\oplus 4").score == 1.0


# Several values read whole are one set or tuple: never equal to one value, equal to a gold list that matches.
SEVERAL = [
    "$\\boxed{3, 4}$",
    "$\\boxed{\\{3, 4\\}}$",
    "$\\boxed{x = 3 \\text{ or } x = 4}$",
    "$\\boxed{3 \\text{ and } 4}$",
]


@pytest.mark.parametrize("completion", SEVERAL)
def test_several_values_read_whole_equal_a_list_gold_only(verifier, completion):
    assert scores(verifier, completion, ("3", "4", "\\{3, 4\\}", "3, 4")) == [0.0, 0.0, 1.0, 1.0]


def test_plus_minus_counts_for_a_plus_minus_gold_only(verifier):
    assert scores(verifier, "$\\boxed{\\pm 2}$", ("2", "-2", "\\pm 2", "\\{-2, 2\\}")) == [0.0, 0.0, 1.0, 1.0]


RIGHT = [  # (completion, gold): each scored 0.0 before
    ("$\\boxed{\\text{6 hours}}$", "6"),
    ("$\\boxed{\\mathrm{6\\ hours}}$", "6"),
    ("$\\boxed{\\text{1,000 dollars}}$", "1000"),
    ("$0.\\overline{3}$", "\\frac{1}{3}"),
    ("The answer is $\\boxed{0.\\overline{3}}$.", "1/3"),
    ("$\\boxed{1.\\overline{6}}$", "\\frac{5}{3}"),
    ("$\\boxed{0.1\\overline{6}}$", "\\frac{1}{6}"),
    ("$\\boxed{0.\\overline{142857}}$", "\\frac{1}{7}"),
    ("$\\boxed{-0.\\overline{3}}$", "-\\frac{1}{3}"),
    ("$\\boxed{0.\\bar{6}}$", "\\frac{2}{3}"),
    ("$\\boxed{10\\,000}$", "10000"),  # math-verify read 10 * 0
]


@pytest.mark.parametrize(("completion", "gold"), RIGHT)
def test_right_answers_math_verify_misread_score_1(verifier, completion, gold):
    result = verifier.verify(completion, answer=gold)
    assert (result.score, result.status) == (1.0, "pass"), result.details


def test_the_rewrites_do_not_make_wrong_answers_right(verifier):
    assert verifier.verify("$\\boxed{\\text{6 hours}}$", answer="7").score == 0.0
    assert verifier.verify("$\\boxed{\\text{6 hours or 7 hours}}$", answer="6").score == 0.0
    assert scores(verifier, "$\\boxed{\\text{3 or 4}}$") == [0.0, 0.0]  # 0.0 before, as text; now refused
    assert scores(verifier, "$\\boxed{3 \\mathrm{\\ or\\ maybe\\ 4}}$") == [0.0, 0.0]
    assert verifier.verify("$\\boxed{0.\\overline{3}}$", answer="0.3").score == 0.0
    assert verifier.verify("$\\boxed{1\\,000}$", answer="0").score == 0.0  # scored 1.0 before (1 * 0)


KEPT = [  # (completion, gold): legitimate answers that score 1.0, as before
    ("$\\boxed{(1, 2)}$", "(1, 2)"),
    ("$\\boxed{\\{1, 2\\}}$", "\\{2, 1\\}"),
    ("$\\boxed{1, 2}$", "\\{1, 2\\}"),
    ("$\\boxed{x = 1, 2}$", "\\{1, 2\\}"),
    ("$\\boxed{x = 1, 2}$", "x = 1, 2"),
    ("$\\boxed{(1, 2), (3, 4)}$", "(1, 2), (3, 4)"),
    ("$\\boxed{(-\\infty, 3] \\cup [5, \\infty)}$", "(-\\infty, 3] \\cup [5, \\infty)"),
    ("$\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}$", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("$\\boxed{12 \\text{ and } 13}$", "12, 13"),
    ("$\\boxed{-1 \\pm \\sqrt{2}}$", "-1 \\pm \\sqrt{2}"),
    ("$\\boxed{1,000}$", "1000"),
    ("$\\boxed{1{,}000}$", "1000"),
    ("$\\boxed{10,\\!080}$", "10080"),
    ("$\\boxed{\\$1,234.56}$", "1234.56"),
    ("$\\boxed{5 \\text{ cm}}$", "5"),
    ("$\\boxed{6\\text{ cm}^{2}}$", "6"),
    ("$\\boxed{\\frac{1}{2}\\text{ cm}^2}$", "0.5"),
    ("$\\boxed{x = 3 \\text{ cm}}$", "3"),
    ("$\\boxed{6 \\quad \\text{(hours)}}$", "6"),
    ("$\\boxed{\\frac{3}{4} \\text{ of the pie}}$", "0.75"),
    ("$\\boxed{1 \\frac{1}{2} \\text{ cups}}$", "1.5"),
    ("$\\boxed{\\dfrac{3}{4}}$", "0.75"),
    ("$\\boxed{-\\dfrac{3}{4}}$", "-0.75"),
    ("$\\boxed{-5}$", "-5"),
    ("$\\boxed{90^\\circ}$", "90"),
    ("$\\boxed{18\\%}$", "18\\%"),
    ("$\\boxed{\\text{Evelyn}}$", "\\text{Evelyn}"),
    ("$\\boxed{\\boxed{3}}$", "3"),
    ("$\\boxed{\\fbox{3}}$", "3"),
    ("$\\boxed{0.\\overline{3}}$", "0.\\overline{3}"),  # the gold is rewritten too
    ("$\\boxed{3 \\mod 4}$", "3"),
    ("She has 18 apples.\n#### 18", "18"),
    ("#### 1,000", "1000"),
    ("#### 1 000", "1000"),
    ("#### $1,234.56", "1234.56"),
    ("#### 18 dollars", "18"),
    ("#### 18.", "18"),
    ("#### -5", "-5"),
    ("#### 3/4", "0.75"),
    ("#### \\frac{3}{4}", "0.75"),
    ("#### 12,50", "12.5"),
    ("#### **18**", "18"),
    ("We add 3 and 4 to get 7.\n#### 7\n", "7"),
    ("#### Step 1: add 3 and 4\nSo the total is 7.", "7"),  # a Markdown heading, not an answer line
    ("#### Final Answer\nThe answer is 7", "7"),
    ("The final answer is $42$. I hope it is correct.", "42"),
    ("To answer this, note $a \\perp b$ always. Then the total is 12.", "12"),  # unanchored: as before
]


@pytest.mark.parametrize(("completion", "gold"), KEPT)
def test_legitimate_answers_still_score_1(verifier, completion, gold):
    result = verifier.verify(completion, answer=gold)
    assert (result.score, result.status) == (1.0, "pass"), result.details
    assert "refused" not in result.details


def test_hack_score_counts_a_box_holding_more_and_two_answer_lines():
    assert MathVerifier.hack_score("$\\boxed{4 \\boxed{3}}$") == 1.0  # scored 0.0 before
    assert MathVerifier.hack_score("$\\boxed{4 \\fbox{3}}$") == 1.0
    assert MathVerifier.hack_score("#### 3\nor rather\n#### 4") == 1.0  # scored 0.0 before
    assert MathVerifier.hack_score("$\\boxed{\\boxed{3}}$") == 0.0
    assert MathVerifier.hack_score("#### 3\n#### 3") == 0.0
    assert MathVerifier.hack_score("$\\boxed{3}$\n#### 3") == 0.0
    assert MathVerifier.hack_score("#### Step 1\n#### Step 2\n$\\boxed{3}$") == 0.0  # headings, not answers
