"""The host-side oracle: splitting asserts, plain-data decoding, host verdicts (no sandbox needed)."""

from __future__ import annotations

import ast
import math
import signal

import pytest

from trl_loo_gspo.verifiers.code.assert_split import ProbeError, judge, program_names, split_test
from trl_loo_gspo.verifiers.code.entry_judge import channel_records, judge_entry, parse_entry
from trl_loo_gspo.verifiers.code.plain_data import HostEvalError, IteratorValue, PlainDataError, decode, host_eval

PROGRAM = "def f(x):\n    return x\n"


def verdict(test: str, *values, program: str = PROGRAM) -> tuple[bool, str]:
    plan = split_test(test, program)
    assert plan.mode == "split", plan
    (probe,) = plan.probes
    return judge(probe, list(values), plan.host_env)


@pytest.mark.parametrize(
    "test, calls, host",
    [
        ("assert f([3, 1]) == [1, 3]", ["f([3, 1])"], "__v0 == [1, 3]"),
        ("assert [1, 3] == f(2)", ["f(2)"], "[1, 3] == __v0"),
        ("assert abs(f(1.33) - 0.33) < 1e-6", ["f(1.33)"], "abs(__v0 - 0.33) < 1e-06"),
        ("assert math.isclose(f(5), 78.5, rel_tol=0.001)", ["f(5)"], "math.isclose(__v0, 78.5, rel_tol=0.001)"),
        ("assert set(f((3, 4))) == set((4, 5))", ["f((3, 4))"], "set(__v0) == set((4, 5))"),
        ("assert f(1) is True", ["f(1)"], "__v0 is True"),
        ("assert not f(0)", ["f(0)"], "not __v0"),
        ("assert f(1) == f(2)", ["f(1)", "f(2)"], "__v0 == __v1"),
        ("assert f('ab').startswith('a')", ["f('ab')"], "__v0.startswith('a')"),
        ("assert f(x=[1] * 3)[0] == 1", ["f(x=[1] * 3)"], "__v0[0] == 1"),
        ("assert 0 < f(3) <= 5", ["f(3)"], "0 < __v0 <= 5"),
        ("assert True", [], "True"),
    ],
)
def test_split_keeps_expected_values_on_the_host(test, calls, host):
    plan = split_test(test, PROGRAM)
    assert plan.mode == "split"
    (probe,) = plan.probes
    assert probe.calls == calls and ast.unparse(probe.verdict) == host and probe.once
    # what the sandbox runs: the calls only
    expected_sandbox = f"__loo_probe__(0{''.join(', lambda: ' + c for c in calls)})"
    assert plan.sandbox_source == expected_sandbox


def test_host_constants_never_enter_the_sandbox_unless_they_are_inputs():
    plan = split_test("expected = [1, 2, 3]\nassert f([3, 2, 1]) == expected", PROGRAM)
    assert plan.mode == "split" and "expected" not in plan.sandbox_source and "[1, 2, 3]" not in plan.sandbox_source
    assert plan.host_env == {"expected": [1, 2, 3]}
    # an input: the assignment stays in the sandbox, and the host reads the (possibly mutated) value back from it
    inplace = split_test("x = [3, 1]\nf(x)\nassert x == [1, 3]", PROGRAM)
    assert "x = [3, 1]" in inplace.sandbox_source and inplace.probes[0].calls == ["x"]
    assert "[1, 3]" not in inplace.sandbox_source


def test_humaneval_form_is_split_in_function_scope():
    test = "METADATA = {'a': 1}\n\ndef check(candidate):\n    assert candidate(2) == 4\n    assert helper(1) == 2\n"
    test += "    for i in range(3):\n        assert candidate(i) == 2 * i\n\ncheck(double)\n"
    plan = split_test(test, "def double(x):\n    return 2 * x\ndef helper(x):\n    return 2 * x\n")
    assert plan.mode == "mixed" and plan.weak_asserts == 2  # a program helper and a loop-derived expected value
    assert "METADATA" not in plan.sandbox_source and "== 4" not in plan.sandbox_source
    assert "def check(candidate):" in plan.sandbox_source and plan.sandbox_source.rstrip().endswith("check(double)")


@pytest.mark.parametrize(
    "test, program",
    [
        ("assert f(1) == ref(1)", PROGRAM + "def ref(x):\n    return x\n"),  # ref is not the entry: but MBPP form...
        ("def ref(x):\n    return x\nassert f(1) == ref(1)", PROGRAM),  # a helper of the test: computed in sandbox
        ("import random\nexpected = random.randint(1, 1)\nassert f(1) == expected", PROGRAM),  # computed in sandbox
        ("assert f(1) == sorted([2, 1])", PROGRAM + "sorted = lambda x: x\n"),  # the program shadows a builtin
        ("import copy\nassert copy.copy(f(1)) == 1", PROGRAM),  # a library call on the output
    ],
)
def test_what_cannot_be_split_runs_in_the_sandbox(test, program):
    plan = split_test(test, program)
    if "ref(x)" in program:  # MBPP form: every program function is under test, so this one is split
        assert plan.mode == "split"
        return
    assert plan.mode == "in_sandbox" and plan.weak_asserts == 1
    assert ast.unparse(ast.parse(plan.sandbox_source)) == ast.unparse(ast.parse(test))


def test_verdicts_on_plain_values():
    assert verdict("assert f(2) == 4", 4) == (True, "passed")
    assert verdict("assert f(2) == 4", 5) == (False, "AssertionError")
    assert verdict("assert f(2) == 4", 4.0) == (True, "passed")  # Python's own ==
    assert verdict("assert f(2) == (1, 2)", [1, 2]) == (False, "AssertionError")  # a list is not a tuple
    assert verdict("assert abs(f(1.33) - 0.33) < 1e-6", 0.33000000001) == (True, "passed")
    assert verdict("assert abs(f(1.33) - 0.33) < 1e-6", "0.33") == (False, "TypeError")
    assert verdict("assert f(2) == 4", ProbeError("ZeroDivisionError")) == (False, "ZeroDivisionError")
    assert verdict("assert f(2) or True", ProbeError("boom")) == (False, "boom")
    assert verdict("assert True or f(2)", ProbeError("boom")) == (True, "passed")  # never needed: short-circuit
    assert verdict("assert list(f(3)) == [0, 1, 2]", IteratorValue([0, 1, 2])) == (True, "passed")
    assert verdict("assert f(3) == [0, 1, 2]", IteratorValue([0, 1, 2])) == (False, "AssertionError")


def test_decode_is_strict():
    assert decode(["l", [["i", "1"], ["f", "2.5"], ["s", "x"], None, True]]) == [1, 2.5, "x", None, True]
    assert decode(["d", [[["t", [["i", "1"]]], ["S", [["i", "2"]]]]]]) == {(1,): {2}}
    assert math.isnan(decode(["f", "nan"])) and decode(["c", "1.0", "-2.0"]) == 1 - 2j
    for bad in (
        1,
        "x",
        ["i", "1.5"],
        ["i", 1],
        ["x", []],
        ["S", [["l", []]]],
        ["d", [[1]]],
        ["f", "1" * 100],
        ["i", "9" * 40_000],
    ):
        with pytest.raises(PlainDataError):
            decode(bad)
    deep: list = ["l", []]
    for _ in range(200):
        deep = ["l", [deep]]
    with pytest.raises(PlainDataError):
        decode(deep)


def test_host_evaluator_caps_and_refusals():
    env = {"__v0": 10**6}
    for expr in ("2 ** __v0", "[0] * __v0 * 10", "1 << __v0 * 1000", "list(range(__v0 * 10))"):
        with pytest.raises(HostEvalError):
            host_eval(ast.parse(expr, mode="eval").body, env)
    for expr in ("__import__('os')", "open('x')", "(lambda: 1)()", "f.__class__", "[x for x in ()]"):
        with pytest.raises(HostEvalError):
            host_eval(ast.parse(expr, mode="eval").body, env)


def test_entry_reports_are_untrusted():
    plan = split_test("assert f(2) == 4\nassert f(3) == 6", PROGRAM)
    good = [["p", 0, [[1, ["i", "4"]]]], ["p", 1, [[1, ["i", "6"]]]], ["end"]]
    assert judge_entry(plan, 0, good) == (True, "passed", None)
    assert judge_entry(plan, 0, good[:1] + [["end"]])[:2] == (False, "not run")  # a probe never reported
    twice = [good[0], good[0], good[1], ["end"]]
    assert judge_entry(plan, 0, twice)[:2] == (False, "tampered")
    assert judge_entry(plan, 0, [["end"], *good])[:2] == (False, "malformed report")
    assert judge_entry(plan, 0, [["p", 7, []], ["end"]])[:2] == (False, "malformed report")
    assert judge_entry(plan, 0, [["program_error", "NameError"]]) == (False, "program raised NameError", "NameError")
    assert judge_entry(plan, 9 << 8, good)[:2] == (False, "exit status 9")  # wait statuses, as waitpid gives them
    assert judge_entry(plan, signal.SIGXCPU, good[:1])[:2] == (False, "cpu")
    assert judge_entry(plan, signal.SIGKILL, good[:1])[:2] == (False, "killed by SIGKILL")
    status, lines = parse_entry("0", b'["p", 0, []]\nnot json\n')
    assert status == 0 and lines == [["p", 0, []], ["malformed"]]
    channel = b'n READY\nstray line\nn ENTRY 0 0 9\n["end"]\nxn DONE 1\n'
    assert channel_records(channel, "n") == [["READY"], ["ENTRY", "0", "0", b'["end"]\nx'], ["DONE", "1"]]


def test_program_names_are_module_level_only():
    program = "import math as m\nclass S:\n    sorted = 1\ndef f(x):\n    len = 2\n    return x\n"
    names, classes = program_names(program)
    assert names == {"m", "S", "f"} and classes == {"S"}
    # a local named like a builtin does not make the test's own sorted() a sandbox value
    plan = split_test("assert sorted(f([2, 1])) == [1, 2]", "def f(x):\n    sorted = list\n    return x\n")
    assert plan.mode == "split"
