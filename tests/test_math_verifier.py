"""MathVerifier on math-verify: equivalent and non-equivalent final answers, garbage, huge completions."""

import random
import time

import pytest

from trl_loo_gspo.verifiers import MathVerifier, VerifierResult
from trl_loo_gspo.verifiers.math import boxed_contents

pytest.importorskip("math_verify")

FILLER = "Let us think step by step. " * 4000  # ~100 kB

EQUIVALENT = [
    ("$\\boxed{0.5}$", "\\frac{1}{2}"),
    ("$\\boxed{\\frac{1}{2}}$", "0.5"),
    ("The answer is $\\boxed{2}$.", "2"),
    ("$\\boxed{\\boxed{3}}$", "3"),
    ("$\\boxed{\\dfrac{3}{4}}$", "0.75"),
    ("So $x = \\boxed{5}$", "5"),
    ("$\\boxed{(1, 2]}$", "(1,2]"),
    ("$\\boxed{[0, 1)}$", "[0,1)"),
    ("$\\boxed{\\{1, 2, 3\\}}$", "\\{3,2,1\\}"),
    ("$\\boxed{2\\sqrt{2}}$", "\\sqrt{8}"),
    ("$\\boxed{10\\text{ cm}}$", "10"),
    ("$\\boxed{-3}$", "-3"),
    ("The final answer is $42$", "42"),
    ("$\\boxed{x^2+2x+1}$", "(x+1)^2"),
    ("$\\boxed{\\pi}$", "\\pi"),
    ("$\\boxed{\\frac{\\pi}{2}}$", "\\pi/2"),
    ("$\\boxed{1/3}$", "\\frac{1}{3}"),
    ("$\\boxed{\\frac{2}{4}}$", "\\frac{1}{2}"),
    ("$\\boxed{5 \\text{ apples}}$", "5"),
    ("$\\boxed{0.333333}$", "\\frac{1}{3}"),
    ("answer: $\\boxed{1000}$", "1000"),
    ("We get $\\boxed{\\sqrt{2}/2}$", "\\frac{\\sqrt{2}}{2}"),
    (FILLER + "Therefore the answer is $\\boxed{9}$.", "9"),
]

NOT_EQUIVALENT = [
    ("$\\boxed{0.51}$", "\\frac{1}{2}"),
    ("$\\boxed{(1,2)}$", "(1,2]"),
    ("$\\boxed{\\{1,2\\}}$", "\\{1,2,3\\}"),
    ("$\\boxed{3}$", "-3"),
    ("$\\boxed{x^2}$", "x^3"),
    ("$\\boxed{10}$", "100"),
    ("The answer is $\\boxed{\\infty}$", "0"),
    ("$\\boxed{2\\sqrt{3}}$", "\\sqrt{8}"),
    ("$\\boxed{0.3333}$", "\\frac{1}{3}"),
    ("$\\boxed{\\frac{1}{3}}$", "\\frac{1}{4}"),
    ("$\\boxed{\\pi}$", "3.14"),
    ("The answer is $\\boxed{7}$", "8"),
]

NO_ANSWER = ["", "I don't know.", "!!! ???", FILLER]


@pytest.fixture(scope="module")
def verifier():
    return MathVerifier()


@pytest.mark.parametrize(("completion", "gold"), EQUIVALENT, ids=[f"eq{i}" for i in range(len(EQUIVALENT))])
def test_equivalent_answers_score_1(verifier, completion, gold):
    result = verifier.verify(completion, answer=gold)
    assert result.score == 1.0 and result.status == "pass", result.details


@pytest.mark.parametrize(("completion", "gold"), NOT_EQUIVALENT, ids=[f"ne{i}" for i in range(len(NOT_EQUIVALENT))])
def test_non_equivalent_answers_score_0(verifier, completion, gold):
    result = verifier.verify(completion, answer=gold)
    assert result.score == 0.0 and result.status == "fail", result.details


@pytest.mark.parametrize("completion", NO_ANSWER, ids=["empty", "words", "garbage", "100kB-filler"])
def test_no_extractable_answer_scores_0_with_a_parse_failure(verifier, completion):
    result = verifier.verify(completion, answer="5")
    assert result.score == 0.0 and result.anomaly == "parse_failure"


def test_a_100kB_completion_is_checked_quickly(verifier):
    start = time.perf_counter()
    result = verifier.verify(FILLER + "$\\boxed{12}$", answer="12")
    assert result.score == 1.0 and result.details["truncated_input"] is True
    assert time.perf_counter() - start < 30  # generous: the point is that it returns, not how fast


@pytest.mark.parametrize("gold", [None, "", "   "])
def test_missing_gold_answer_is_unscorable_not_zero(verifier, gold):
    result = verifier.verify("$\\boxed{1}$", answer=gold)
    assert result.score is None and result.anomaly == "parse_failure"


def test_trl_reward_function_interface_plain_and_conversational(verifier):
    scores = verifier(
        prompts=["q1", "q2", "q3"],
        completions=["$\\boxed{7}$", [{"role": "assistant", "content": "$\\boxed{8}$"}], "no idea"],
        completion_ids=[[1], [2], [3]],
        answer=["7", "7", "7"],
        trainer_state=object(),
    )
    assert scores == [1.0, 0.0, 0.0]
    assert [r.status for r in verifier.last_results] == ["pass", "fail", "fail"]
    assert verifier.__name__ == "math" and verifier.describe()["version"].startswith("2+math-verify-")


def test_exceptions_become_unscorable_and_anomalies_are_logged():
    class Broken(MathVerifier):
        def verify(self, completion, **columns):
            raise RuntimeError("boom")

    logged = {}
    verifier = Broken()
    scores = verifier(completions=["a", "b"], answer=["1", "1"], log_metric=lambda k, v: logged.__setitem__(k, v))
    assert scores == [None, None]
    assert (
        verifier.last_results[0].anomaly == "verifier_exception"
        and "boom" in verifier.last_results[0].details["error"]
    )
    assert logged["verifiers/math/anomaly/verifier_exception"] == 1.0
    assert logged["verifiers/math/unscorable"] == 1.0
    assert verifier.anomaly_counts["verifier_exception"] == 2


def test_hack_score_flags_hedged_and_spammed_answers():
    assert MathVerifier.hack_score("so $\\boxed{2}$") == 0.0
    assert MathVerifier.hack_score("$\\boxed{2}$ or maybe $\\boxed{3}$") == 1.0
    assert MathVerifier.hack_score("$\\boxed{2}$ again $\\boxed{ 2 }$") == 0.0  # the same answer twice
    assert MathVerifier.hack_score("$\\boxed{2}$" * 5) == 1.0  # spam


def test_result_rejects_unknown_anomaly_kinds():
    with pytest.raises(ValueError):
        VerifierResult(0.0, "fail", "oops")


def quadratic_boxed_contents(text: str) -> list[str]:
    """The former implementation (a depth count from every opener), as the reference."""
    import re

    contents = []
    for match in re.finditer(r"\\boxed\s*\{", text):
        depth, start = 1, match.end()
        for position in range(start, len(text)):
            depth += text[position] == "{"
            depth -= text[position] == "}"
            if depth == 0:
                contents.append(text[start:position].strip())
                break
    return contents


def test_boxed_contents_match_the_former_depth_count_on_random_text():
    rng = random.Random("boxed")
    pieces = ["\\boxed{", "\\boxed {", "\\boxed", "{", "}", "}}", "x", " ", "\n", "2", "\\frac{1}{2}"]
    nonempty = 0
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 14)))
        expected = quadratic_boxed_contents(text)
        assert boxed_contents(text) == expected, repr(text)
        nonempty += bool(expected)
    assert nonempty > 5_000


MB = 1_000_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{" * (MB // 7), 0.0),  # nothing closed: no answer
        ("\\boxed{" * (MB // 14) + "}" * (MB // 14), 1.0),  # nested: many distinct boxed answers
        ("{" * (MB // 2) + "\\boxed{" + "}" * (MB // 2), 0.0),  # one answer, deep in braces
    ],
    ids=["unclosed", "nested", "deep-braces"],
)
def test_hack_score_is_linear_on_a_megabyte_of_boxes(text, expected):
    uncapped = MathVerifier(max_completion_chars=None)
    start = time.process_time()  # CPU time: other jobs on the machine do not count
    assert uncapped.hack_score(text) == expected
    assert time.process_time() - start < 5.0  # generous: the former scan took minutes (37 s for 70 kB unclosed)


def test_oversize_completions_score_zero_and_count_as_hacks():
    text = "\\boxed{" * (MB // 7)
    verifier = MathVerifier()
    start = time.process_time()  # CPU time: other jobs on the machine do not count
    result = verifier.safe_verify(text, answer="1")
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", "oversize")
    assert result.details["completion_chars"] == len(text) and result.details["max_completion_chars"] == 100_000
    assert verifier.hack_score(text) == 1.0 and MathVerifier.hack_score(text) == 1.0
    assert time.process_time() - start < 5.0
    assert MathVerifier.max_completion_chars == 100_000
    small = MathVerifier(max_completion_chars=20)
    assert small.safe_verify("$\\boxed{2}$" + " " * 20, answer="2").anomaly == "oversize"
    assert small.hack_score("$\\boxed{2}$" + " " * 20) == 1.0  # the instance's cap, not the class's
    assert MathVerifier.hack_score("$\\boxed{2}$" + " " * 20) == 0.0
    assert small.safe_verify("$\\boxed{2}$", answer="2").score == 1.0
