"""The per-verifier size cap: a completion over ``max_completion_chars`` scores 0.0 unchecked (anomaly oversize)."""

import time

import pytest

from trl_loo_gspo.verifiers import ANOMALY_KINDS, Verifier, VerifierResult
from trl_loo_gspo.verifiers.base import DEFAULT_MAX_COMPLETION_CHARS
from trl_loo_gspo.verifiers.shaping import ShapedReward

ADD_0_R = "Theorem add_0_r : forall n : nat, n + 0 = n."
MB = 1_000_000


class Counting(Verifier):
    """Scores 1.0 and counts its calls: an oversize completion must never reach :meth:`verify`."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def verify(self, completion: str, **columns) -> VerifierResult:
        self.calls += 1
        return VerifierResult(1.0, "pass")


class NoBackend:
    """A proof backend that must not be used: oversize completions are scored without running anything."""

    def check(self, *args, **kwargs):
        raise AssertionError("an oversize completion reached the proof checker")

    trace_goals = check


def test_oversize_is_an_anomaly_kind():
    assert "oversize" in ANOMALY_KINDS
    assert VerifierResult(0.0, "fail", "oversize").anomaly == "oversize"


def test_the_cap_is_checked_before_verify_and_scores_zero_not_none():
    verifier = Counting()
    assert verifier.max_completion_chars == DEFAULT_MAX_COMPLETION_CHARS == 200_000
    assert verifier.safe_verify("x" * DEFAULT_MAX_COMPLETION_CHARS).score == 1.0  # at the cap: checked
    result = verifier.safe_verify("x" * (DEFAULT_MAX_COMPLETION_CHARS + 1))
    assert (result.score, result.status, result.anomaly, result.spans) == (0.0, "fail", "oversize", None)
    assert result.details["completion_chars"] == DEFAULT_MAX_COMPLETION_CHARS + 1
    assert verifier.calls == 1


def test_an_instance_may_lower_or_lift_the_cap():
    verifier = Counting()
    verifier.max_completion_chars = 3
    assert verifier.safe_verify("abcd").anomaly == "oversize" and verifier.calls == 0
    verifier.max_completion_chars = None
    assert verifier.safe_verify("x" * MB).score == 1.0 and verifier.calls == 1


def test_oversize_is_logged_under_the_anomaly_metric_and_is_not_unscorable():
    verifier = Counting()
    verifier.max_completion_chars = 5
    logged: dict[str, float] = {}
    scores = verifier(completions=["short", "much too long", [{"role": "assistant", "content": "x" * 6}], "ok"],
                      log_metric=logged.__setitem__)  # fmt: skip
    assert scores == [1.0, 0.0, 0.0, 1.0]
    assert logged["verifiers/counting/anomaly/oversize"] == 0.5
    assert logged["verifiers/counting/unscorable"] == 0.0
    assert verifier.anomaly_counts["oversize"] == 2


def test_an_oversize_completion_has_no_spans_when_spans_are_emitted():
    verifier = Counting()
    verifier.emit_spans, verifier.max_completion_chars = True, 1
    assert verifier.safe_verify("ab").spans == []


def test_class_defaults_per_verifier():
    from trl_loo_gspo.verifiers.code.verifier import CodeVerifier
    from trl_loo_gspo.verifiers.math import MathVerifier
    from trl_loo_gspo.verifiers.proofs.coq import CoqVerifier

    assert (MathVerifier.max_completion_chars, CoqVerifier.max_completion_chars) == (100_000, 100_000)
    assert CodeVerifier.max_completion_chars == 200_000


@pytest.mark.parametrize(
    "script",
    ["(*" * (MB // 2), '"' * MB, "a. " * (MB // 3), "```coq\n" + "{ " * (MB // 2)],
    ids=["comment-openers", "quotes", "dots", "braces"],
)
def test_a_megabyte_coq_completion_is_oversize_without_lexing_or_running(script):
    from trl_loo_gspo.verifiers.proofs.coq import CoqVerifier

    verifier = CoqVerifier(backend=NoBackend())
    start = time.process_time()  # CPU time: other jobs on the machine do not count
    result = verifier.safe_verify(script, theorem=ADD_0_R)
    hack = verifier.hack_score(script, theorem=ADD_0_R)
    assert time.process_time() - start < 5.0
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", "oversize")
    assert hack == 1.0  # padding past the cap is no way around the hack penalty
    lifted = CoqVerifier(backend=NoBackend(), max_completion_chars=None)
    assert lifted.max_completion_chars is None and verifier.max_completion_chars == 100_000


def test_shaping_keeps_the_hack_penalty_on_an_oversize_completion():
    pytest.importorskip("math_verify")
    from trl_loo_gspo.verifiers.math import MathVerifier

    shaped = ShapedReward(MathVerifier(max_completion_chars=50), lambda_hack=0.5)
    hedged = "$\\boxed{3}$ or $\\boxed{2}$"  # hedged: 0 - 0.5
    padded = "$\\boxed{2}$" + " " * 100  # right, but past the cap: 0 - 0.5
    assert shaped(completions=[hedged, padded, "$\\boxed{2}$"], answer=["2"] * 3) == [-0.5, -0.5, 1.0]
