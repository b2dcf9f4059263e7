"""The verl adapter (issue 33): ``compute_score`` called as verl's reward managers call it — keyword arguments
``data_source``, ``solution_str``, ``ground_truth``, ``extra_info``, one completion at a time — without verl."""

from __future__ import annotations

import shutil

import pytest

from trl_loo_gspo.verifiers import CodeVerifier, MathVerifier, Verifier, VerifierResult
from trl_loo_gspo.verifiers.adapters import verl_compute_score


class Unscorable(Verifier):
    name = "stub"
    gold_column = "answer"

    def verify(self, completion, **columns):
        return VerifierResult(None, "unscorable", "timeout", {"columns": sorted(columns)})


def test_math_through_verls_calling_convention() -> None:
    compute_score = verl_compute_score({"math": MathVerifier()})
    right = compute_score(data_source="math", solution_str="So it is \\boxed{\\frac{1}{2}}.", ground_truth="0.5",
                          extra_info={"index": 3})  # fmt: skip
    assert right == {"score": 1.0, "unscorable": False, "status": "pass", "anomaly": ""}
    wrong = compute_score(data_source="math", solution_str="\\boxed{3}", ground_truth="4", extra_info=None)
    assert wrong["score"] == 0.0 and not wrong["unscorable"]


def test_routing_by_extra_info_then_data_source_then_default() -> None:
    math, stub = MathVerifier(), Unscorable()
    compute_score = verl_compute_score({"math": math, "stub": stub}, default="math")
    # extra_info names the verifier: the stub, whatever the data source
    routed = compute_score(data_source="math", solution_str="\\boxed{4}", ground_truth="4",
                           extra_info={"verifier": "stub"})  # fmt: skip
    assert routed["unscorable"] and routed["score"] == 0.0 and routed["anomaly"] == "timeout"
    # an unknown data source goes to the default
    assert compute_score(data_source="openai/gsm8k", solution_str="\\boxed{4}", ground_truth="4")["score"] == 1.0
    strict = verl_compute_score({"math": math})
    with pytest.raises(ValueError, match=r"no verifier for data_source 'openai/gsm8k'.*known: \['math'\]"):
        strict(data_source="openai/gsm8k", solution_str="\\boxed{4}", ground_truth="4")
    with pytest.raises(ValueError, match="default 'code' is not one of the verifiers"):
        verl_compute_score({"math": math}, default="code")


def test_unscorable_gets_the_chosen_score_and_is_flagged() -> None:
    compute_score = verl_compute_score({"stub": Unscorable()}, unscorable_score=-1.0)
    result = compute_score(data_source="stub", solution_str="x", ground_truth="1", extra_info={"columns": {"k": 2}})
    assert result == {"score": -1.0, "unscorable": True, "status": "unscorable", "anomaly": "timeout"}


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the code verifier's sandbox needs bubblewrap")
def test_code_tests_from_a_json_ground_truth() -> None:
    compute_score = verl_compute_score({"code": CodeVerifier()})
    tests = '["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]'
    right = compute_score(data_source="code", solution_str="```python\ndef add(a, b):\n    return a + b\n```",
                          ground_truth=tests)  # fmt: skip
    wrong = compute_score(data_source="code", solution_str="```python\ndef add(a, b):\n    return a - b\n```",
                          ground_truth=tests)  # fmt: skip
    assert right["score"] == 1.0 and wrong["score"] == 0.0, (right, wrong)
