"""Verifier outputs travel with the reward call (issue #34): ``score_batch`` returns the scores with the per-answer
results, the verifier keeps nothing per call, and the trainer's checked reward functions hand each call's results
to process feedback through that call's :class:`RewardOutputs`."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from trl_loo_gspo.algorithms.span_types import SpanSignal
from trl_loo_gspo.trainer.checks import RewardChecks, RewardOutputs
from trl_loo_gspo.trainer.process import ProcessFeedback
from trl_loo_gspo.trainer.run_plan import ProcessFeedbackPlan
from trl_loo_gspo.verifiers import RewardOutput, Verifier, VerifierResult
from trl_loo_gspo.verifiers.shaping import ShapedReward


class EchoVerifier(Verifier):
    """Scores ``len(completion)`` and echoes the row's ``tag`` in the details and a span; the first answer of each
    call waits at a barrier so that two calls are inside the verifier at the same time."""

    name = "echo"
    emit_spans = True

    def __init__(self, barrier: threading.Barrier | None = None) -> None:
        super().__init__()
        self.barrier = barrier

    def verify(self, completion: str, tag: str = "", **_):
        if self.barrier is not None and completion.startswith("first"):
            self.barrier.wait(timeout=10)
        span = SpanSignal(0, len(completion), 1.0, "step", key=f"step:{tag}")
        return VerifierResult(float(len(completion)), "pass", None, {"tag": tag}, [span])


def call_of(tag: str, n: int) -> dict:
    completions = ["first" + "x" * i if i == 0 else "y" * (i + len(tag)) for i in range(n)]
    return {"prompts": ["p"] * n, "completions": completions, "tag": [f"{tag}{i}" for i in range(n)]}


def test_concurrent_calls_each_get_their_own_results():
    verifier = EchoVerifier(threading.Barrier(2))
    calls = {"a": call_of("a", 3), "bb": call_of("bb", 5)}
    with ThreadPoolExecutor(2) as pool:
        futures = {tag: pool.submit(verifier.score_batch, **call) for tag, call in calls.items()}
        outputs = {tag: future.result(timeout=30) for tag, future in futures.items()}
    for tag, call in calls.items():
        output = outputs[tag]
        assert [r.details["tag"] for r in output.results] == call["tag"]
        assert output.scores == tuple(float(len(c)) for c in call["completions"])
        assert [r.spans[0].key for r in output.results] == [f"step:{t}" for t in call["tag"]]
    # TRL's plain interface, concurrently too: each caller its own scores
    verifier.barrier = threading.Barrier(2)
    with ThreadPoolExecutor(2) as pool:
        futures = {tag: pool.submit(verifier, **call) for tag, call in calls.items()}
        for tag, future in futures.items():
            assert future.result(timeout=30) == [float(len(c)) for c in calls[tag]["completions"]]


def test_a_call_leaves_no_per_call_state_on_the_verifier():
    verifier = EchoVerifier()
    before = set(vars(verifier))
    output = verifier.score_batch(**call_of("a", 2))
    assert set(vars(verifier)) == before and not hasattr(verifier, "last_results")
    assert isinstance(output, RewardOutput) and len(output.results) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        output.scores = ()


def _verifier_classes() -> list[type]:
    for package in ("trl_loo_gspo.verifiers", "trl_loo_gspo.demo"):
        for module in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            importlib.import_module(module.name)
    found, todo = [], [Verifier]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in {*found, ShapedReward} if c.__module__.startswith("trl_loo_gspo.")]


#: Attributes a verifier may set outside ``__init__``, with the reason: none is a result of a call.
ALLOWED_ASSIGNMENTS = {("CodeVerifier", "_pool")}  # the sandbox thread pool, started at the first batch


def test_no_verifier_stores_per_call_results_on_itself():
    classes = _verifier_classes()
    assert {"Verifier", "MathVerifier", "CodeVerifier", "CoqVerifier", "MultiStepVerifier", "ShapedReward"} <= {
        c.__name__ for c in classes
    }
    offending = []
    for cls in classes:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        methods = [n for n in tree.body[0].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for method in methods:
            if method.name == "__init__":
                continue
            for node in ast.walk(method):
                targets = node.targets if isinstance(node, ast.Assign) else []
                if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                    targets = [node.target]
                for target in targets:
                    for attr in ast.walk(target):
                        if (
                            isinstance(attr, ast.Attribute)
                            and isinstance(attr.value, ast.Name)
                            and attr.value.id == "self"
                            and (cls.__name__, attr.attr) not in ALLOWED_ASSIGNMENTS
                        ):
                            offending.append(f"{cls.__module__}.{cls.__name__}.{method.name} sets self.{attr.attr}")
    assert not offending, offending
    sources = [inspect.getsource(importlib.import_module(c.__module__)) for c in classes]
    assert not any("last_results" in s for s in sources)


def test_shaped_reward_returns_the_wrapped_verifiers_results_with_shaped_scores():
    verifier = EchoVerifier()
    shaped = ShapedReward(verifier, lambda_hack=0.5, hack_detector=lambda text, **_: 1.0)
    call = call_of("a", 3)
    output = shaped.score_batch(**call)
    assert output.scores == tuple(float(len(c)) - 0.5 for c in call["completions"])
    assert [r.score for r in output.results] == [float(len(c)) for c in call["completions"]]  # unshaped
    assert shaped(**call) == list(output.scores)
    plain = ShapedReward(lambda completions, **_: [1.0] * len(completions))
    assert plain.score_batch(**call) == RewardOutput((1.0, 1.0, 1.0), None)


def test_checked_reward_funcs_hand_each_call_its_own_outputs():
    verifier = EchoVerifier()
    user = [lambda completions, **_: [0.0] * len(completions), verifier]
    checks = RewardChecks(len(user))
    seen = []
    for tag, n in (("a", 2), ("bb", 3)):
        outputs = RewardOutputs()
        plain, checked = checks.checked(user, outputs)
        assert plain(**call_of(tag, n)) == [0.0] * n
        assert checked(**call_of(tag, n)) == [float(len(c)) for c in call_of(tag, n)["completions"]]
        assert user[1] is verifier  # the user's list is never changed
        assert outputs.get(0) is None  # a plain function: no per-answer results
        seen.append(outputs)
    assert [[r.details["tag"] for r in o.get(1).results] for o in seen] == [["a0", "a1"], ["bb0", "bb1", "bb2"]]
    assert checks.tallies[1].completions == 5
    checked = checks.checked(user, RewardOutputs())[1]
    checked(**call_of("a", 1))
    with pytest.raises(RuntimeError, match="called twice in one reward call"):
        checked(**call_of("a", 1))


def test_process_feedback_reads_the_calls_outputs_only():
    verifier = EchoVerifier()
    feedback = ProcessFeedback(ProcessFeedbackPlan(coef=0.5, window=4), [verifier], None, accelerator=None)
    outputs = RewardOutputs()
    outputs.recorder(0, "echo")(verifier.score_batch(**call_of("a", 2)))
    entries = feedback.collect_signals(outputs, 2)
    assert [e["final"] for e in entries] == [5.0, 2.0]
    assert [[s.key for s in e["spans"]] for e in entries] == [["step:a0"], ["step:a1"]]
    with pytest.raises(RuntimeError, match="returned no per-answer results"):
        feedback.collect_signals(RewardOutputs(), 2)
    with pytest.raises(RuntimeError, match="2 results for 3 rows"):
        feedback.collect_signals(outputs, 3)
