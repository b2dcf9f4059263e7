"""CodeVerifier span signals (method §6): code block and per-function values, offsets, hack flags, score unchanged."""

from __future__ import annotations

import shutil

import pytest

from trl_loo_gspo.verifiers.code import verifier as code_module
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier, code_bounds, code_spans, extract_code

from .helpers import small_sandbox_limits as small_limits

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap (CI installs it)",
)


@pytest.fixture(scope="module")
def spans_on() -> CodeVerifier:
    return CodeVerifier(limits=small_limits(), max_workers=2, emit_spans=True)


@pytest.fixture(scope="module")
def spans_off() -> CodeVerifier:
    return CodeVerifier(limits=small_limits(), max_workers=2)


PROSE_BEFORE = "Voilà — the solution:\n"
PROSE_AFTER = "\nBoth functions are short.\n"
ADD_SRC = "@staticmethod\ndef add(a, b):\n    return a + b"  # staticmethod works as a plain decorator in 3.10+
SUB_SRC = "def sub(a, b):\n    return a + b  # wrong"
HELPER_SRC = "def helper():\n    return 'é'"
PROGRAM = f"{ADD_SRC}\n\n\n{SUB_SRC}\n\n\n{HELPER_SRC}\n"
TWO_FUNCTIONS = f"{PROSE_BEFORE}```python\n{PROGRAM}```{PROSE_AFTER}"
TESTS = ["assert add(1, 2) == 3", "assert sub(2, 0) == 2", "assert sub(5, 3) == 2", "assert add(-1, 1) == 0"]


def by_key(spans):
    return {s.key: s for s in spans}


# -- pure (no sandbox) ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "```python\nx = 1\n```\nthen\n```\nplain = 2\n```\nfinally\n```python\n\nfinal = 3\n\n```\nbye",
        "```\nonly_plain = 1\n```",
        "```text\nnot code\n```\n```\nplain = 1\n```",
        "\n\ndef f():\n    return 1\n\n",
        "intro\n```python\nunterminated = 1\n",
        "```text\nonly prose\n```",
    ],
)
def test_code_bounds_locate_the_extracted_code(text):
    start, end = code_bounds(text)
    assert text[start:end] == extract_code(text)


def test_missing_done_semantics():
    """Per-test outcome = the judge's pass (reason "passed"), with or without DONE; a test not run counts as failed."""
    code = "def f(x):\n    return 2 * x\n\ndef g(x):\n    return x\n"
    tests = ["assert f(1) == 2", "assert f(2) == 4", "assert g(1) == 1"]
    checks = [  # all-or-nothing without DONE: every `passed` is False, yet test 0 did pass
        {"kind": "test", "index": 0, "passed": False, "reason": "passed"},
        {"kind": "test", "index": 1, "passed": False, "reason": "not run"},
        {"kind": "test", "index": 2, "passed": False, "reason": "AssertionError"},
    ]
    details = {"compiles": True, "checks": checks, "tests_run": {"completed": False}}
    spans = by_key(code_spans(code, 7, details, tests, []))
    assert spans["function:f"].value == 0.5 and spans["function:f"].flags == ()
    assert (spans["function:g"].value, spans["function:g"].flags) == (0.0, ())
    assert (spans["code_block"].value, spans["code_block"].flags) == (1.0, ())
    assert (spans["code_block"].start, spans["code_block"].end) == (7, 7 + len(code))


def test_unscorable_run_gives_only_the_code_block_span():
    spans = code_spans("def f():\n    return 1", 0, {"compiles": True}, ["assert f() == 1"], [])
    assert [(s.kind, s.value) for s in spans] == [("code_block", 1.0)]


# -- real sandbox runs ---------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_bwrap
def test_function_values_and_offsets(spans_on):
    result = spans_on.verify(TWO_FUNCTIONS, tests=TESTS)
    assert (result.score, result.status) == (0.0, "fail")  # all-or-nothing: sub is wrong
    spans = by_key(result.spans)
    assert set(spans) == {"code_block", "function:add", "function:sub"}  # helper: targeted by no test, no span
    block, add, sub = spans["code_block"], spans["function:add"], spans["function:sub"]
    assert (block.kind, block.value, block.flags) == ("code_block", 1.0, ())
    assert TWO_FUNCTIONS[block.start : block.end] == PROGRAM.rstrip("\n")
    assert block.start == len(PROSE_BEFORE) + len("```python\n")
    assert block.meta == {"tests_passed": 3, "tests_total": 4}
    assert (add.kind, add.value, add.flags, add.meta["tests"]) == ("function", 1.0, (), [0, 3])
    assert TWO_FUNCTIONS[add.start : add.end] == ADD_SRC  # decorators included
    assert (sub.value, sub.flags, sub.meta["tests"]) == (0.5, (), [1, 2])
    assert TWO_FUNCTIONS[sub.start : sub.end] == SUB_SRC
    # the prose around the block is covered by no span
    assert min(s.start for s in result.spans) == block.start and max(s.end for s in result.spans) == block.end
    assert block.start > 0 and block.end < len(TWO_FUNCTIONS) - len(PROSE_AFTER)


@pytest.mark.slow
@needs_bwrap
def test_humaneval_check_and_methods_are_targeted(spans_on):
    code = "class Solution:\n    def twice(self, x):\n        return 2 * x\n\n"
    code += "    def unused(self):\n        return 0\n"
    code += "\ndef total(xs):\n    return sum(xs)\n\ndef check(x):\n    return x\n"  # the test's own check shadows it
    check = "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 1\n\ncheck(total)\n"
    completion = f"```python\n{code}```"
    reference = "class Solution:\n    def twice(self, x):\n        pass\n\ndef total(xs):\n    pass\n"  # an object
    result = spans_on.verify(completion, tests=[check, "assert Solution().twice(3) == 6"], reference=reference)
    spans = by_key(result.spans)
    assert set(spans) == {"code_block", "function:total", "function:Solution.twice"}
    assert spans["function:total"].value == 0.0 and spans["function:total"].meta["tests"] == [0]
    assert spans["function:Solution.twice"].value == 1.0
    assert completion[spans["function:Solution.twice"].start : spans["function:Solution.twice"].end] == (
        "def twice(self, x):\n        return 2 * x"
    )


@pytest.mark.slow
@needs_bwrap
def test_non_compiling_block(spans_on):
    completion = "Try this:\n```python\ndef add(a, b:\n    return a + b\n```\nthanks"
    result = spans_on.verify(completion, tests=TESTS)
    assert result.score == 0.0 and result.details["compiles"] is False
    assert [(s.kind, s.value) for s in result.spans] == [("code_block", 0.0)]
    assert completion[result.spans[0].start : result.spans[0].end] == "def add(a, b:\n    return a + b"


@pytest.mark.slow
@needs_bwrap
def test_no_code_and_spans_off(spans_on, spans_off):
    assert spans_on.verify("```python\n\n```", tests=TESTS).spans == []
    assert spans_on.verify("```text\nno python here\n```", tests=TESTS).spans == []
    assert spans_off.verify(TWO_FUNCTIONS, tests=TESTS).spans is None


@pytest.mark.slow
@needs_bwrap
def test_hardcoded_function_is_flagged(spans_on):
    code = "def add(a, b):\n    if (a, b) == (1, 2):\n        return 3\n    return {(-1, 1): 0}[(a, b)]\n"
    code += "\ndef sub(a, b):\n    return a - b\n"
    result = spans_on.verify(f"```python\n{code}```", tests=TESTS)
    assert result.score == 1.0  # the hack passes the tests ...
    spans = by_key(result.spans)
    assert (spans["function:add"].value, spans["function:add"].flags) == (0.0, ("hardcoded",))  # ... not the span
    assert (spans["function:sub"].value, spans["function:sub"].flags) == (1.0, ())
    # an explicit base case next to a computed answer is not special-casing
    fib = "def fib(n):\n    if n == 0:\n        return 0\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
    clean = spans_on.verify(f"```python\n{fib}```", tests=["assert fib(0) == 0", "assert fib(10) == 55"])
    assert [(s.key, s.value, s.flags) for s in clean.spans] == [("code_block", 1.0, ()), ("function:fib", 1.0, ())]


@pytest.mark.slow
@needs_bwrap
def test_tampering_functions_are_flagged(spans_on):
    # patching the harness anywhere zeroes every function and the block
    patched = "import builtins\nbuiltins.AssertionError = Exception\n\ndef add(a, b):\n    return a + b\n"
    spans = by_key(spans_on.verify(f"```python\n{patched}```", tests=TESTS[:1]).spans)
    assert (spans["function:add"].value, spans["function:add"].flags) == (0.0, ("harness",))
    assert (spans["code_block"].value, spans["code_block"].flags) == (0.0, ("harness",))
    # an AlwaysEqual class is flagged on every function, not only the one returning it (the judge does not fall for
    # it: the object is not plain data, so add's tests fail)
    always = (
        "class Anything:\n    def __eq__(self, other):\n        return True\n\ndef add(a, b):\n    return Anything()\n"
    )
    always += "\ndef sub(a, b):\n    return a - b\n"
    result = spans_on.verify(f"```python\n{always}```", tests=TESTS)
    assert result.score == 0.0
    assert [(s.key, s.value, s.flags) for s in result.spans] == [
        ("code_block", 0.0, ("always_equal",)),
        ("function:add", 0.0, ("always_equal",)),
        ("function:sub", 0.0, ("always_equal",)),
    ]
    # a function that ends the harness from inside; the other function keeps its own signal
    exiting = "import os\n\ndef sub(a, b):\n    os._exit(0)\n\ndef add(a, b):\n    return a + b\n"
    result = spans_on.verify(f"```python\n{exiting}```", tests=TESTS)
    spans = by_key(result.spans)
    assert result.score == 0.0
    assert (spans["function:sub"].value, spans["function:sub"].flags) == (0.0, ("early_exit",))
    # each test runs in a fresh process: sub's exit ends only its own tests, both of add's tests still run
    assert (spans["function:add"].value, spans["function:add"].flags) == (1.0, ())


@pytest.mark.slow
@needs_bwrap
def test_io_cases_give_block_meta_only(spans_on):
    code = "import sys\n\ndef double(x):\n    return 2 * x\n\nprint(double(int(sys.stdin.read())))\n"
    cases = [{"input": "2", "output": "4"}, {"input": "3", "output": "7"}]
    result = spans_on.verify(f"```python\n{code}```", io_cases=cases)
    assert [s.kind for s in result.spans] == ["code_block"]
    assert result.spans[0].value == 1.0
    assert result.spans[0].meta == {"io_passed": 1, "io_total": 2, "io_fraction": 0.5, "io_skipped": 0}


@pytest.mark.slow
@needs_bwrap
def test_score_is_identical_with_and_without_spans(spans_on, spans_off):
    rows = [
        (TWO_FUNCTIONS, {"tests": TESTS}),
        ("```python\ndef add(a, b):\n    return a + b\ndef sub(a, b):\n    return a - b\n```", {"tests": TESTS}),
        ("```python\ndef add(a, b:\n```", {"tests": TESTS}),
        ("```python\n\n```", {"tests": TESTS}),
        ("```python\nimport os\nos._exit(0)\n```", {"tests": TESTS}),
        ("```python\nprint(int(input()) * 2)\n```", {"io_cases": [{"input": "2", "output": "4"}]}),
    ]
    partial_on = CodeVerifier(limits=small_limits(), partial_credit=True, emit_spans=True)
    partial_off = CodeVerifier(limits=small_limits(), partial_credit=True)
    for on, off in ((spans_on, spans_off), (partial_on, partial_off)):
        for text, columns in rows:
            with_spans, without = on.verify(text, **columns), off.verify(text, **columns)
            assert with_spans.spans is not None and without.spans is None
            assert (with_spans.score, with_spans.status, with_spans.anomaly) == (
                without.score,
                without.status,
                without.anomaly,
            )
            assert with_spans.details.get("passed") == without.details.get("passed")
    assert [partial_on.verify(text, **columns).score for text, columns in rows] == [0.75, 1.0, 0.0, 0.0, 0.0, 1.0]


@needs_bwrap
def test_a_span_bug_does_not_change_the_score(monkeypatch):
    v = CodeVerifier(limits=small_limits(), emit_spans=True)
    monkeypatch.setattr(code_module, "code_spans", lambda *a: 1 / 0)
    result = v.safe_verify("```python\ndef add(a, b:\n```", tests=TESTS)  # does not compile: no sandbox run needed
    assert (result.score, result.status, result.spans) == (0.0, "fail", None)
    assert result.details["spans_error"] == "ZeroDivisionError: division by zero"


@pytest.mark.slow
@needs_bwrap
def test_frame_access_and_mock_any_flag_every_function(spans_on):
    code = "import sys\n\ndef add(a, b):\n    return sys._getframe(1).f_locals and a + b\n\ndef sub(a, b):\n"
    code += "    return a - b\n"
    spans = by_key(spans_on.verify(f"```python\n{code}```", tests=TESTS).spans)
    assert "frame_access" in spans["function:sub"].flags and spans["function:sub"].value == 0.0
    mock = "from unittest.mock import ANY\n\ndef add(a, b):\n    return ANY\n\ndef sub(a, b):\n    return a - b\n"
    spans = by_key(spans_on.verify(f"```python\n{mock}```", tests=TESTS).spans)
    assert spans["function:sub"].flags == ("mock_any",) and spans["function:sub"].value == 0.0
