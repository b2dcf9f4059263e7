"""Which names of a test are the program's (issue 45, round 5): each class of the review, on the real sandboxed
verifier where a score is at stake. 1: a standard-library name the test forgot to import is undefined whatever its
case; 2: a builtin the program defines is the program's when the test calls nothing else of it; 3: every accepted
form of ``entry_points`` is read, and a declaration that cannot be read is refused, never dropped; 4: a reference's
other functions (an oracle, a checker) run on the judge's side."""

from __future__ import annotations

import shutil
import warnings

import datasets
import pytest

from trl_loo_gspo.experiment.data import prepare_dataset
from trl_loo_gspo.verifiers.code.test_plan import plan_test, program_names
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(), max_workers=2)


def judge(verifier: CodeVerifier, code: str, tests: list[str], **columns):
    return verifier.verify(f"```python\n{code}\n```", tests=tests, **columns)


def plan(test: str, **columns):
    names = program_names(columns)
    return plan_test(
        test, names.entry_points, names.classes, names.members, names.undeclared, names.pick, names.reference
    )


# -- 1: a forgotten lower-case import is undefined, not the program's ---------------------------------------------

ISCLOSE_TEST = ["assert isclose(area(3), 28.274, rel_tol=1e-3)"]
ISCLOSE_HACK = "def isclose(*a, **k):\n    return True\ndef area(r):\n    return 0\n"

FORGOTTEN = {
    "isclose": "assert isclose(area(3), 28.274, rel_tol=1e-3)",
    "factorial": "assert fact(5) == factorial(5)",
    "sqrt": "assert dist((0, 0), (1, 1)) == sqrt(2)",
    "permutations": "assert sorted(perms([1, 2, 3])) == sorted(permutations([1, 2, 3]))",
    "deepcopy": "xs = [3, 1, 2]\norig = deepcopy(xs)\nsort_in_place(xs)\nassert xs == sorted(orig)",
    "pi": "assert area(1) == pi",
}


@pytest.mark.parametrize("name", sorted(FORGOTTEN))
def test_1_a_forgotten_standard_library_name_is_undefined_whatever_its_case(name):
    why = plan(FORGOTTEN[name]).undefined
    assert why is not None and repr(name) in why
    # through a variable and through HumanEval's form, the same
    assert "'isclose'" in (plan("x = area(3)\nassert isclose(x, 28.274)").undefined or "")
    humaneval = "def check(candidate):\n    assert isclose(candidate(3), 28.274)\n\ncheck(area)\n"
    assert "'isclose'" in (plan(humaneval).undefined or "")


def test_1_a_standard_library_named_entry_point_called_on_the_actual_side_stays_the_programs():
    for test in (
        "assert add(1, 2) == 3\nassert sub(3, 1) == 2",
        "assert mean([1, 3]) == 2 and gcd(4, 6) == 2",
        "assert factorial(5) == 120",  # the test's only name
        "assert isclose(0.1 + 0.2, 0.3)",
    ):
        assert plan(test).undefined is None, test
    # imported by the test: the real function, judged in the judge
    assert plan("from math import isclose\n" + ISCLOSE_TEST[0]).remote == ("area",)


@needs_bwrap
def test_1_the_forgotten_isclose_hack_no_longer_scores(verifier):
    result = judge(verifier, ISCLOSE_HACK, ISCLOSE_TEST)
    assert (result.score, result.anomaly) == (None, "undefined_name"), result.details
    deepcopy_hack = "def deepcopy(xs):\n    return []\ndef sort_in_place(xs):\n    xs.clear()\n"
    result = judge(verifier, deepcopy_hack, [FORGOTTEN["deepcopy"]])
    assert (result.score, result.anomaly) == (None, "undefined_name"), result.details
    right = "import math\ndef area(r):\n    return math.pi * r * r\n"
    assert judge(verifier, right, ["from math import isclose\n" + ISCLOSE_TEST[0]]).score == 1.0
    assert judge(verifier, ISCLOSE_HACK, ["from math import isclose\n" + ISCLOSE_TEST[0]]).score == 0.0


# -- 2: a builtin name the program defines is the program's when the test calls nothing else of it --------------

BUILTIN_TESTS = {
    "pow": ("assert pow(2, 3) == 8", "def pow(a, b):\n    return a ** b\n"),
    "abs": ("assert abs(-3) == 3", "def abs(x):\n    return -x if x < 0 else x\n"),
    "max": (
        "assert max([1, 5, 2]) == 5",
        "def max(xs):\n    best = xs[0]\n    for x in xs:\n        best = x if x > best else best\n    return best\n",
    ),
    "sorted": (
        "assert sorted([3, 1, 2]) == [1, 2, 3]",
        "def sorted(xs):\n    out = list(xs)\n    out.sort()\n    return out\n",
    ),
    "sum": ("assert sum([1, 2, 3]) == 6", "def sum(xs):\n    t = 0\n    for x in xs:\n        t += x\n    return t\n"),
}


@needs_bwrap
@pytest.mark.parametrize("entry", sorted(BUILTIN_TESTS))
def test_2_a_right_builtin_named_function_without_a_declaration_scores(verifier, entry):
    test, right = BUILTIN_TESTS[entry]
    assert judge(verifier, right, [test]).score == 1.0
    assert judge(verifier, f"def {entry}(*args):\n    return 0\n", [test]).score == 0.0
    # the old attack: no program at all, the builtin answers, nothing of the program is called
    result = judge(verifier, "answer = 42\n", [test])
    assert result.score == 0.0
    assert result.details["checks"][0]["reason"] == "the test made no call into the program"


@needs_bwrap
def test_2_a_program_defined_builtin_never_answers_the_expected_side(verifier):
    # the test calls the program's my_sort: sorted stays the real one
    hack = "def sorted(xs):\n    return 0\ndef my_sort(xs):\n    return 0\n"
    assert judge(verifier, hack, ["assert my_sort([3, 1, 2]) == sorted([3, 1, 2])"]).score == 0.0
    # two builtins of the test defined: neither is taken, nothing of the program is called
    both = "def sorted(xs):\n    return 0\ndef list(xs):\n    return 0\n"
    assert judge(verifier, both, ["assert sorted([3, 1, 2]) == list((1, 2, 3))"]).score == 0.0
    # an argument that cannot cross makes such a test fail, never unscorable (the program chose the name)
    test = "k = (lambda v: -v,)\nassert sorted([1, 2, 3], key=k[0]) == [3, 2, 1]"
    defines = "def sorted(xs, key=None):\n    return [3, 2, 1]\n"
    result = judge(verifier, defines, [test])
    assert (result.score, result.status) == (0.0, "fail"), result.details
    assert judge(verifier, "answer = 42\n", [test]).score == 0.0


# -- 3: every accepted form of entry_points is read; a declaration that cannot be read is refused ------------------


@pytest.mark.parametrize(
    "declared",
    [["area"], ("area",), "area", '["area"]', "['area']", "area, perimeter", '["area", "perimeter"]'],
    ids=repr,
)
def test_3_every_accepted_form_of_entry_points_is_read(declared):
    names = program_names({"entry_points": declared})
    assert names.error is None
    assert "area" in (names.entry_points or ())
    assert "'isclose'" in (plan(ISCLOSE_TEST[0], entry_points=declared).undefined or "")


@pytest.mark.parametrize(
    ("columns", "column"),
    [
        ({"entry_points": []}, "entry_points"),
        ({"entry_points": ""}, "entry_points"),
        ({"entry_points": "[]"}, "entry_points"),
        ({"entry_points": "area perimeter"}, "entry_points"),
        ({"entry_points": '["area", 3]'}, "entry_points"),
        ({"entry_points": ["area()"]}, "entry_points"),
        ({"reference": "def area(r):\n    print 'x'\n"}, "reference"),
        ({"reference": "x = 1\n"}, "reference"),
    ],
    ids=repr,
)
def test_3_an_unreadable_or_empty_declaration_is_an_error_not_a_fallback(columns, column):
    names = program_names(columns)
    assert names.error is not None and repr(column) in names.error
    rows = {"prompt": ["p", "q"], "tests": [["assert f(1) == 1"], ISCLOSE_TEST]}
    rows[column] = [
        ["f"] if column == "entry_points" else "def f(x):\n    return x\n",
        columns[column],
    ]
    if column == "entry_points" and isinstance(columns[column], str):
        rows[column][0] = "f"
    with pytest.raises(ValueError, match=rf"row 1, column '{column}'"):
        prepare_dataset(datasets.Dataset.from_dict(rows), "code", mapper="identity")


@needs_bwrap
@pytest.mark.parametrize("declared", ['["area"]', "area, perimeter"], ids=repr)
def test_3_a_string_declaration_closes_the_forgotten_import(verifier, declared):
    result = judge(verifier, ISCLOSE_HACK, ISCLOSE_TEST, entry_points=declared)
    assert (result.score, result.anomaly) == (None, "undefined_name"), result.details


@needs_bwrap
@pytest.mark.parametrize(
    "columns", [{"entry_points": []}, {"reference": "def area(r):\n    print 'x'\n"}], ids=["empty", "python2"]
)
def test_3_an_unreadable_declaration_is_unscorable_when_scored(verifier, columns):
    result = judge(verifier, ISCLOSE_HACK, ["assert area(3) == isclose(1, 1)"], **columns)
    assert (result.score, result.anomaly) == (None, "undefined_name"), result.details
    assert "declaration_error" in result.details


def test_3_prepare_dataset_counts_the_rows_without_a_declaration():
    rows = {
        "prompt": ["p", "q", "r"],
        "tests": [["assert f(1) == 1"], ["assert g(1) == 1"], ["assert h(1) == 1"]],
        "entry_points": [None, ["g"], None],
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare_dataset(datasets.Dataset.from_dict(rows), "code", mapper="identity")
    messages = [str(w.message) for w in caught if "declare" in str(w.message)]
    assert len(messages) == 1 and messages[0].startswith("2 of 3 code rows"), messages
    assert "inferred" in messages[0] and "entry_points" in messages[0]


# -- 4: a reference's oracle runs on the judge's side ------------------------------------------------------------

ORACLE_REFERENCE = "def solve(n):\n    return n * (n + 1) // 2\n\ndef brute(n):\n    return sum(range(n + 1))\n"
ORACLE_TESTS = ["assert solve(10) == brute(10)", "for n in range(20):\n    assert solve(n) == brute(n)"]
CHECKER_REFERENCE = (
    "def pair_sum(xs, t):\n    seen = {}\n    for i, x in enumerate(xs):\n        if t - x in seen:\n"
    "            return [seen[t - x], i]\n        seen[x] = i\n    return None\n\n"
    "def is_pair(xs, t, ij):\n    return ij is not None and ij[0] != ij[1] and xs[ij[0]] + xs[ij[1]] == t\n"
)
CHECKER_TESTS = ["assert is_pair([2, 7, 11, 15], 9, pair_sum([2, 7, 11, 15], 9))"]


def test_4_only_the_actual_sides_function_of_a_reference_is_the_programs():
    assert plan(ORACLE_TESTS[0], reference=ORACLE_REFERENCE).remote == ("solve",)
    assert plan(CHECKER_TESTS[0], reference=CHECKER_REFERENCE).remote == ("pair_sum",)
    for test in ("x = brute(3)\nassert solve(3) == x", "assert abs(solve(3) - brute(3)) < 1e-9"):
        assert plan(test, reference=ORACLE_REFERENCE).remote == ("solve",), test
    # declared entry points: every other function of the reference is the judge's
    assert plan(ORACLE_TESTS[0], entry_points=["solve"], reference=ORACLE_REFERENCE).remote == ("solve",)
    # a test calling one function of the reference is unchanged
    assert plan("assert brute(3) == 6", reference=ORACLE_REFERENCE).remote == ("brute",)


@needs_bwrap
@pytest.mark.parametrize("declared", [False, True], ids=["reference", "entry_points"])
def test_4_the_program_cannot_answer_both_sides_of_an_oracle(verifier, declared):
    columns = {"reference": ORACLE_REFERENCE, **({"entry_points": ["solve"]} if declared else {})}
    both = "def solve(n):\n    return 0\ndef brute(n):\n    return 0\n"
    assert judge(verifier, both, ORACLE_TESTS, **columns).score == 0.0
    right = "def solve(n):\n    return n * (n + 1) // 2\n"  # no brute of its own: the reference's runs
    assert judge(verifier, right, ORACLE_TESTS, **columns).score == 1.0


@needs_bwrap
def test_4_the_program_cannot_answer_a_references_checker(verifier):
    liar = "def is_pair(*a):\n    return True\ndef pair_sum(xs, t):\n    return None\n"
    assert judge(verifier, liar, CHECKER_TESTS, reference=CHECKER_REFERENCE).score == 0.0
    right = "def pair_sum(xs, t):\n    return [0, 1]\n"
    assert judge(verifier, right, CHECKER_TESTS, reference=CHECKER_REFERENCE).score == 1.0


@needs_bwrap
def test_4_a_round_trip_checks_the_programs_encoder_against_the_references_decoder(verifier):
    reference = (
        "import sys\nKEY = 3\nprint(sys.stdin.read())\n\n"  # top-level statements never run in the judge
        "def encode(s):\n    return ''.join(chr(ord(c) + KEY) for c in s)\n\n"
        "def decode(s):\n    return ''.join(chr(ord(c) - KEY) for c in s)\n\n"
        "if __name__ == '__main__':\n    raise SystemExit(1)\n"
    )
    tests = ["from __future__ import annotations\ns = 'abc'\nassert decode(encode(s)) == s"]
    planned = plan(tests[0], reference=reference)
    assert planned.remote == ("encode",) and planned.helpers == ("decode",)
    assert planned.source.startswith("from __future__ import annotations\n") and "print(" not in planned.source
    identity = "def encode(s):\n    return s\ndef decode(s):\n    return s\n"  # passed the round trip before
    assert judge(verifier, identity, tests, reference=reference).score == 0.0
    right = "def encode(s):\n    return ''.join(chr(ord(c) + 3) for c in s)\n"
    assert judge(verifier, right, tests, reference=reference).score == 1.0
    # declared as two entry points, the program's pair is judged together, as before
    pair = {"reference": reference, "entry_points": ["encode", "decode"]}
    assert plan(tests[0], **pair).remote == ("decode", "encode")
    assert judge(verifier, identity, tests, **pair).score == 1.0


SOLUTION_REFERENCE = (
    "class Solution:\n    def total(self, n):\n        return n * (n + 1) // 2\n\n"
    "def brute(n):\n    return sum(range(n + 1))\n"
)
PAIR_REFERENCE = (
    "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n\n"
    "def widest(ps):\n    return max(p.b - p.a for p in ps)\n"
)


def test_4_a_reference_class_is_the_programs_as_the_entry_or_as_an_input_only():
    # the class is the test's entry on its actual side: the function beside it runs in the judge
    for test in ("assert Solution().total(4) == brute(4)", "sol = Solution()\nassert sol.total(4) == brute(4)"):
        planned = plan(test, reference=SOLUTION_REFERENCE)
        assert (planned.remote, planned.helpers) == (("Solution",), ("brute",)), test
    # a class only built as the program's input stays the program's (a handle crosses back to it)
    inputs = ("assert widest([Pair(1, 2), Pair(2, 5)]) == 3", "ps = [Pair(1, 2)]\nr = widest(ps)\nassert r == 1")
    for test in inputs:
        planned = plan(test, reference=PAIR_REFERENCE)
        assert (planned.remote, planned.helpers) == (("Pair", "widest"), ()), test
    # an oracle written as a class of the reference, beside a declared entry point: the judge's
    reference = "def solve(n):\n    return n\n\nclass Brute:\n    def run(self, n):\n        return n\n"
    planned = plan("assert solve(5) == Brute().run(5)", entry_points=["solve"], reference=reference)
    assert (planned.remote, planned.helpers) == (("solve",), ("Brute",))


@needs_bwrap
def test_4_the_program_cannot_answer_both_sides_through_a_class(verifier):
    tests = [
        "assert Solution().total(10) == brute(10)",
        "s = Solution()\nfor n in range(9):\n    assert s.total(n) == brute(n)",
    ]
    liar = "class Solution:\n    def total(self, n):\n        return 0\ndef brute(n):\n    return 0\n"
    assert judge(verifier, liar, tests, reference=SOLUTION_REFERENCE).score == 0.0
    right = "class Solution:\n    def total(self, n):\n        return n * (n + 1) // 2\n"
    assert judge(verifier, right, tests, reference=SOLUTION_REFERENCE).score == 1.0
    pair = "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\ndef widest(ps):\n"
    pair += "    return max(p.b - p.a for p in ps)\n"
    assert (
        judge(verifier, pair, ["assert widest([Pair(1, 2), Pair(2, 5)]) == 3"], reference=PAIR_REFERENCE).score == 1.0
    )
