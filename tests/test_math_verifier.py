"""MathVerifier on math-verify: equivalent and non-equivalent final answers, garbage, huge completions, relations in
the final answer, and the worker process (time limits from any thread, without the GIL; restarts; copies)."""

import copy
import os
import pickle
import random
import threading
import time

import pytest

from trl_loo_gspo.verifiers import MathVerifier, VerifierResult
from trl_loo_gspo.verifiers.math import boxed_contents, shutdown_workers

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
    call = dict(
        prompts=["q1", "q2", "q3"],
        completions=["$\\boxed{7}$", [{"role": "assistant", "content": "$\\boxed{8}$"}], "no idea"],
        completion_ids=[[1], [2], [3]],
        answer=["7", "7", "7"],
        trainer_state=object(),
    )
    assert verifier(**call) == [1.0, 0.0, 0.0]
    output = verifier.score_batch(**call)
    assert output.scores == (1.0, 0.0, 0.0)
    assert [r.status for r in output.results] == ["pass", "fail", "fail"]
    assert verifier.__name__ == "math" and verifier.describe()["version"].startswith("5+math-verify-")


def test_exceptions_become_unscorable_and_anomalies_are_logged():
    class Broken(MathVerifier):
        def verify(self, completion, **columns):
            raise RuntimeError("boom")

    logged = {}
    verifier = Broken()
    output = verifier.score_batch(
        completions=["a", "b"], answer=["1", "1"], log_metric=lambda k, v: logged.__setitem__(k, v)
    )
    assert output.scores == (None, None)
    assert output.results[0].anomaly == "verifier_exception" and "boom" in output.results[0].details["error"]
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
        ("\\boxed{" * (MB // 14) + "}" * (MB // 14), 0.0),  # nested: one (empty) innermost answer
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


# Relations (equations, approximations, inequalities) in the final answer count only against a gold relation.

REFUSED_FOR_GOLD_3 = [
    "$\\boxed{4 = 3}$",
    "$\\boxed{3 \\approx 4}$",
    "$\\boxed{3 \\approx 3}$",
    "$\\boxed{3 = 3}$",
    "$\\boxed{3 ≈ 4}$",
    "$\\boxed{3 \\simeq 3}$",
    "$\\boxed{3 \\simeq 4}$",  # math-verify fails on this box and reads the 4 of another match
    "$\\boxed{x \\approx 3}$",
    "$\\boxed{3 = 4 = 3}$",  # math-verify keeps the last part of this chain: the text shows it
    "$\\boxed{x = 4 = 3}$",
    "$\\boxed{\\frac{6}{2} = 3}$",
    "$\\boxed{f(2) = 3}$",
    "The answer is $4 = 3$",  # no box: the last LaTeX answer
    "$\\boxed{3 \\approx 4}$, finally $\\boxed{\\frac{}{}}$",  # the parsed answer is not the last match tried
]
VALUES_FOR_GOLD_3 = [
    "$\\boxed{3}$",
    "$\\boxed{x = 3}$",
    "$\\boxed{n=3}$",
    "$\\boxed{x_1 = 3}$",
    "$\\boxed{\\alpha = 3}$",
    "So $x = \\boxed{3}$",
    "$\\boxed{x = 3 \\text{ cm}}$",
    "$\\boxed{x \\in \\{3\\}}$",
]
RELATION_GOLDS = [  # (completion, gold, score): compared by math-verify as before the rule
    ("$\\boxed{y = 2x + 1}$", "y = 2x + 1", 1.0),
    ("$\\boxed{y = 1 + 2x}$", "y = 2x + 1", 1.0),
    ("$\\boxed{y = 2x + 2}$", "y = 2x + 1", 0.0),
    ("$\\boxed{x > 2}$", "x > 2", 1.0),
    ("$\\boxed{(2, \\infty)}$", "x > 2", 1.0),
    ("$\\boxed{x \\geq 2}$", "x \\ge 2", 1.0),
    ("$\\boxed{x < 2}$", "x > 2", 0.0),
    ("$\\boxed{3 \\approx 3.0}$", "3 \\approx 3", 1.0),
]


@pytest.mark.parametrize("completion", REFUSED_FOR_GOLD_3)
def test_a_relation_in_the_final_answer_scores_0_against_a_value(verifier, completion):
    result = verifier.verify(completion, answer="3")
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", None), result.details
    assert "gold answer is not" in result.details["refused"]


@pytest.mark.parametrize("completion", VALUES_FOR_GOLD_3)
def test_a_value_or_variable_equals_value_still_scores_1(verifier, completion):
    result = verifier.verify(completion, answer="3")
    assert (result.score, result.status) == (1.0, "pass"), result.details
    assert "refused" not in result.details


def test_lists_of_assignments_are_values(verifier):
    assert verifier.verify("$\\boxed{x = 3 \\text{ or } x = 4}$", answer="\\{3, 4\\}").score == 1.0
    assert verifier.verify("$\\boxed{(x, y) = (1, 2)}$", answer="(1, 2)").score == 1.0
    assert verifier.verify("$\\boxed{x = 3, y = 4 = 5}$", answer="\\{3, 5\\}").score == 0.0


@pytest.mark.parametrize(("completion", "gold", "score"), RELATION_GOLDS)
def test_a_relation_gold_answer_is_compared_as_before(verifier, completion, gold, score):
    result = verifier.verify(completion, answer=gold)
    assert result.score == score and "refused" not in result.details, result.details


# math-verify runs in a worker process: every call bounded in wall time, from any thread, without the GIL.

CUBIC = "$$" + "\\boxed{1}" * 2200  # 19.8 kB (under max_chars), no closing $$: cubic in math-verify (~40 min)


def test_a_pathological_completion_times_out_off_the_main_thread_without_holding_the_gil(verifier):
    checker = MathVerifier(timeout_seconds=2)
    assert checker.verify("$\\boxed{1}$", answer="1").score == 1.0  # a started worker: its start is not timed
    ticks: list[float] = []
    outcome: dict = {}
    done = threading.Event()

    def count() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    def check() -> None:
        outcome["start"] = time.monotonic()
        outcome["result"] = checker.verify(CUBIC, answer="1")
        outcome["end"] = time.monotonic()
        done.set()

    counter, worker = threading.Thread(target=count), threading.Thread(target=check)
    counter.start()
    worker.start()
    worker.join(120)
    done.set()
    counter.join()
    assert not worker.is_alive()
    result = outcome["result"]
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", "timeout"), result.details
    assert outcome["end"] - outcome["start"] < 2 + 4  # timeout_seconds + the grace + a generous margin
    during = [outcome["start"], *(tick for tick in ticks if outcome["start"] < tick < outcome["end"]), outcome["end"]]
    gaps = [later - earlier for earlier, later in zip(during, during[1:], strict=False)]
    assert len(during) > 10 and max(gaps) < 1.5  # the counting thread kept running (every 10 ms): the GIL was free
    assert verifier.verify("$\\boxed{2}$", answer="2").score == 1.0  # and the next check works


def test_a_gold_answer_that_times_out_is_unscorable():
    result = MathVerifier(timeout_seconds=1).verify("$\\boxed{1}$", answer="$$" + "\\boxed{1}" * 700)
    assert (result.score, result.status, result.anomaly) == (None, "unscorable", "timeout"), result.details


STUCK_WORKER = """
import math_verify, signal, time
_parse = math_verify.parse
def _stuck_parse(text, *args, **kwargs):
    if "STUCK" in text:  # a call math-verify's alarm cannot end: SIGALRM blocked
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3600)
    return _parse(text, *args, **kwargs)
math_verify.parse = _stuck_parse
"""


@pytest.fixture
def stuck_workers(monkeypatch):
    """Workers whose parse never returns on a text containing STUCK (as a call the alarm cannot stop)."""
    import trl_loo_gspo.verifiers.math_worker as module

    shutdown_workers()
    source = module._worker_source()
    monkeypatch.setattr(module, "_worker_source", lambda: source + STUCK_WORKER)
    yield module
    shutdown_workers()


def test_a_worker_past_the_limit_is_killed_and_replaced(stuck_workers):
    checker = MathVerifier(timeout_seconds=1)
    assert checker.verify("$\\boxed{1}$", answer="1").score == 1.0
    pid = stuck_workers._worker_pool()._idle[0].process.pid
    start = time.monotonic()
    result = checker.verify("$\\boxed{STUCK}$", answer="1")
    assert time.monotonic() - start < 1 + 4  # timeout_seconds + the grace + a generous margin
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", "timeout"), result.details
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    gold = checker.verify("$\\boxed{1}$", answer="STUCK")
    assert (gold.score, gold.status, gold.anomaly) == (None, "unscorable", "timeout"), gold.details
    assert checker.verify("$\\boxed{2}$", answer="2").score == 1.0  # a new worker


def test_concurrent_checks_from_threads_are_right(verifier):
    cases = EQUIVALENT[:6] + NOT_EQUIVALENT[:6] + [("$\\boxed{4 = 3}$", "3"), ("$\\boxed{x = 3}$", "3")]
    expected = [1.0] * 6 + [0.0] * 6 + [0.0, 1.0]
    scores: dict[int, list] = {}

    def run(thread: int) -> None:
        scores[thread] = [verifier.verify(completion, answer=gold).score for completion, gold in cases]

    threads = [threading.Thread(target=run, args=(n,)) for n in range(3)]  # up to three workers at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert all(scores[n] == expected for n in range(3)), scores


def test_verifiers_pickle_and_copy_without_their_worker():
    verifier = MathVerifier(timeout_seconds=3)
    assert verifier.verify("$\\boxed{\\frac{1}{2}}$", answer="0.5").score == 1.0
    for clone in (pickle.loads(pickle.dumps(verifier)), copy.deepcopy(verifier), copy.copy(verifier)):
        assert clone.timeout_seconds == 3 and clone.verify("$\\boxed{0.5}$", answer="\\frac{1}{2}").score == 1.0
        assert clone.verify("$\\boxed{4 = 3}$", answer="3").score == 0.0


@pytest.mark.parametrize("timeout", [0, -1, None])
def test_timeout_seconds_must_be_positive(timeout):
    with pytest.raises(ValueError):
        MathVerifier(timeout_seconds=timeout)
