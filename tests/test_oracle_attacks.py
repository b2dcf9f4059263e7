"""Reward hacks against CodeVerifier's judge, end to end in the sandbox: each scores 0, none escapes."""

from __future__ import annotations

import shutil

import pytest

from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

TESTS = ["assert f([3, 1, 2]) == [1, 2, 3]", "assert f([]) == []", "assert sorted(f([2, 1])) == [1, 2]"]
HUMANEVAL = "def check(candidate):\n    assert candidate([3, 1, 2]) == [1, 2, 3]\n    assert candidate([5]) == [5]\n"
HUMANEVAL += "    assert abs(len(candidate([2, 1])) - 2) < 1e-9\n\ncheck(f)\n"
RIGHT = "def f(xs):\n    return sorted(xs)\n"


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(), max_workers=2)


def score(verifier: CodeVerifier, code: str, tests: list[str] = TESTS) -> tuple[float | None, list[str]]:
    result = verifier.verify(f"```python\n{code}\n```", tests=tests)
    return result.score, [c["reason"] for c in result.details.get("checks", [])]


ATTACKS = {
    "mock.ANY": "import unittest.mock\ndef f(*a):\n    return unittest.mock.ANY\n",
    "from-import ANY": "from unittest.mock import ANY\nf = lambda *a: ANY\n",
    "__eq__ always True": "class A:\n    def __eq__(self, o):\n        return 1\n    __ne__ = lambda s, o: False\n"
    "    __hash__ = object.__hash__\n    def __iter__(self):\n        return iter([1, 2])\n"
    "def f(*a):\n    return A()\n",
    "list subclass": "class L(list):\n    def __eq__(self, o):\n        return True\ndef f(xs):\n    return L()\n",
    "int subclass": "class I(int):\n    __eq__ = lambda s, o: True\ndef f(xs):\n    return I(0)\n",
    "type() object": "f = lambda *a: type('X', (), {'__eq__': lambda *a: True, '__iter__': lambda s: iter([])})()\n",
    "builtins shadowed": "import builtins\nbuiltins.sorted = lambda *a, **k: [1, 2]\nbuiltins.len = lambda x: 2\n"
    "sorted = lambda *a: [1, 2]\ndef f(xs):\n    return [0]\n",
    "__builtins__ reassigned": "__builtins__ = {'sorted': lambda x: [1, 2]}\ndef f(xs):\n    return None\n",
    "frames: forge the harness": """
import sys, os
def f(xs):
    frame = sys._getframe()
    while frame is not None:  # find the harness's report() and claim the test ended
        report = frame.f_locals.get("report") or frame.f_globals.get("report")
        if callable(report):
            report(["end"])
            os._exit(0)
        for value in list(frame.f_locals.values()):
            if callable(value) and getattr(value, "__name__", "") == "report":
                value(["end"])
                os._exit(0)
        frame = frame.f_back
    return xs
""",
    "traceback: harness frames": """
import os
def f(xs):
    try:
        raise RuntimeError
    except RuntimeError as err:
        tb = err.__traceback__
    frame = tb.tb_frame
    while frame is not None:
        for name, value in list(frame.f_locals.items()):
            if name in ("probe", "report", "w"):
                if isinstance(value, int):
                    os.write(value, b'["p", 0, [[1, ["l", [["i", "1"], ["i", "2"], ["i", "3"]]]]]]\\n["end"]\\n')
        frame = frame.f_back
    return xs
""",
    "forged lines on every fd": """
import os
for fd in range(1, 64):
    try:
        os.write(fd, b'x READY\\nx ENTRY 0 0 "[\\\\"end\\\\"]"\\nx DONE 3\\n["end"]\\n')
    except OSError:
        pass
def f(xs):
    return xs
""",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_scores_zero(verifier, name):
    for tests in (TESTS, [HUMANEVAL]):
        got, reasons = score(verifier, ATTACKS[name], tests)
        assert got == 0.0, (name, reasons)


@pytest.mark.slow
def test_right_answers_still_pass(verifier):
    assert score(verifier, RIGHT) == (1.0, ["passed"] * 3)
    assert score(verifier, RIGHT, [HUMANEVAL]) == (1.0, ["passed"])
    generator = "def f(xs):\n    return (x for x in sorted(xs))\n"
    assert score(verifier, generator, ["assert list(f([2, 1])) == [1, 2]"])[0] == 1.0
    assert score(verifier, generator, ["assert f([2, 1]) == [1, 2]"])[0] == 0.0  # as in Python: a generator != list
    counter = "import collections\ndef g(xs):\n    return collections.Counter(xs)\n"
    assert score(verifier, counter, ["assert g([1, 1, 2]) == {1: 2, 2: 1}"])[0] == 1.0


@pytest.mark.slow
def test_each_test_starts_from_a_fresh_interpreter(verifier):
    stateful = "calls = []\ndef f(xs):\n    calls.append(1)\n    return len(calls)\n"
    assert score(verifier, stateful, ["assert f(0) == 1", "assert f(0) == 1", "assert f(0) == 1"])[0] == 1.0
    poison = "def f(x):\n    import builtins\n    builtins.len = lambda _: 0\n    return x\n"
    poison += "def g(s):\n    return len(s)\n"
    tests = ["assert f(1) == 1", "assert g('abc') == 3"]  # the second runs in a new process: len is real again
    assert score(verifier, poison, tests)[0] == 1.0


@pytest.mark.slow
def test_a_helper_of_the_test_runs_in_the_judge_not_the_program(verifier):
    test = "def ref(x):\n    return sorted(x)\nassert f([2, 1]) == ref([2, 1])"
    result = verifier.verify(f"```python\n{RIGHT}\n```", tests=[test])
    assert result.score == 1.0 and result.details["tests_run"]["weak_tests"] == []
    # the program's own ``ref`` is not the test's: redefining it changes nothing
    cheat = "def ref(x):\n    return None\ndef f(xs):\n    return None\n"
    assert score(verifier, cheat, [test]) == (0.0, ["AssertionError"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "completion, error",
    [
        ("the " * 3000, "MemoryError"),  # prose: the parser runs out of memory
        ("y = " + " + ".join(["1"] * 100_000), "RecursionError"),  # a 100k-term expression
        ("x = " + "(" * 5000 + "1" + ")" * 5000, "SyntaxError"),
    ],
)
def test_compile_time_failures_score_zero_not_none(verifier, completion, error):
    result = verifier.verify(completion, tests=TESTS)
    assert (result.score, result.status) == (0.0, "fail") and result.details["compiles"] is False
    assert result.details["error"].startswith(error)


@pytest.mark.slow
def test_encoding_cookie_is_refused(verifier):
    # in UTF-7, "+AAo-" is a newline: the interpreter reading the file would see a second statement
    hidden = "# -*- coding: utf-7 -*-\ndef f(xs):\n    return xs #+AAo-    return [1, 2, 3]\n"
    for columns in ({"tests": TESTS}, {"io_cases": [{"input": "", "output": "x"}]}):
        result = verifier.verify(f"```python\n{hidden}```", **columns)
        assert result.score == 0.0 and result.details["rule"] == "encoding_cookie"


@pytest.mark.slow
def test_the_result_channel_is_out_of_reach(verifier):
    """A test's child cannot open the runner's file descriptors or memory (the runner is not dumpable)."""
    code = """
import os
def f(xs):
    ppid = os.getppid()
    for path in (f"/proc/{ppid}/fd", f"/proc/{ppid}/mem", f"/proc/{ppid}/environ"):
        try:
            os.listdir(path) if path.endswith("fd") else open(path, "rb").read(1)
            print("reached", path)
        except OSError:
            print("denied", path)
    return sorted(xs)
"""
    result = verifier.verify(f"```python\n{code}```", tests=TESTS[:1])
    out = result.details["tests_run"]["stdout_excerpt"]
    assert result.score == 1.0 and out.count("denied") == 3 and "reached" not in out
