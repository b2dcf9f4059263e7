"""Issue #45 (judge): what a one-process test does to the program is carried across the boundary — its redirected
output, its seed, its test cases — so a right program scores 1 and its wrong twin 0; forged capture frames and
cases the program tries to skip gain nothing."""

from __future__ import annotations

import pytest

from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits
from .test_judge_interpretation import judge, needs_bwrap
from .test_wire_issue45 import forged

pytestmark = needs_bwrap

REDIRECT = (
    "import io\nfrom contextlib import redirect_stdout\nbuf = io.StringIO()\nprint('before', file=buf)\n"
    "with redirect_stdout(buf):\n    r = greet('bob')\n    print('test')\n"
    "assert buf.getvalue() == 'before\\nhi bob\\ntest\\n'\nassert r == 3"
)
SEED = (
    "import random\nrandom.seed(3)\nexpected = [random.randint(1, 6) for _ in range(20)]\nrandom.seed(3)\n"
    "assert [roll() for _ in range(20)] == expected"
)
UNITTEST = (
    "import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    "    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n\n"
    "if __name__ == '__main__':\n    unittest.main()\n"
)

# (right program, wrong twin, tests): each right program scored 0 before (checked on 64ddcfe: AssertionError for the
# redirections and the seed, SystemExit for unittest.main(), "the test made no call into the program" for the cases
# never run)
CASES = {
    "redirect_stdout": (
        "def greet(n):\n    print('hi', n)\n    return 3\n",
        "def greet(n):\n    print('hello', n)\n    return 3\n",
        [REDIRECT],
    ),
    "sys.stdout replaced by the test": (
        "def greet(n):\n    print('hi', n)\n",
        "def greet(n):\n    return 'hi ' + n\n",
        ["import io, sys\nold = sys.stdout\nsys.stdout = io.StringIO()\ngreet('x')\nout = sys.stdout.getvalue()\n"
         "sys.stdout = old\nassert out == 'hi x\\n'"],
    ),
    "redirect_stderr": (
        "import sys\ndef warn(n):\n    print('bad', n, file=sys.stderr)\n",
        "def warn(n):\n    print('bad', n)\n",
        ["import io\nfrom contextlib import redirect_stderr\nb = io.StringIO()\nwith redirect_stderr(b):\n"
         "    warn(1)\nassert b.getvalue() == 'bad 1\\n'"],
    ),
    "a generator that prints": (
        "def g():\n    for i in range(3):\n        print(i)\n        yield i\n",
        "def g():\n    print(0, 1, 2)\n    yield from range(3)\n",
        ["import io\nfrom contextlib import redirect_stdout\nb = io.StringIO()\nwith redirect_stdout(b):\n"
         "    xs = list(g())\nassert xs == [0, 1, 2] and b.getvalue() == '0\\n1\\n2\\n'"],
    ),
    "random.seed": (
        "import random\ndef roll():\n    return random.randint(1, 6)\n",
        "import random\ndef roll():\n    return 7 - random.randint(1, 6)\n",
        [SEED],
    ),
    "from random import": (
        "from random import randint\ndef roll():\n    return randint(1, 6)\n",
        "import random\ndef roll():\n    random.seed(0)\n    return random.randint(1, 6)\n",
        [SEED.replace("import random\nrandom.seed", "from random import seed, randint\nimport random\nseed")],
    ),
    "unittest.main()": (
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return a * b\n",
        [UNITTEST, UNITTEST.replace("unittest.main()", "unittest.main(argv=['x'], exit=False)")],
    ),
    "TestCase never run": (
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return 3\n",
        [UNITTEST.split("\n\nif")[0] + "\n"],
    ),
    "pytest-style test never called": (
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return a * b\n",
        ["def test_add():\n    assert add(1, 2) == 3\n\ndef test_more():\n    assert add(2, 3) == 5\n"],
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(), max_workers=2)


@pytest.mark.parametrize("shape", sorted(CASES))
def test_a_right_program_scores_1_and_its_wrong_twin_0(verifier, shape):
    right, wrong, tests = CASES[shape]
    result = judge(verifier, right, tests)
    assert result.score == 1.0, result.details
    assert judge(verifier, wrong, tests).score == 0.0


def test_output_not_redirected_still_goes_to_the_runs_excerpt(verifier):
    result = judge(verifier, "def greet(n):\n    print('hi', n)\n    return 3\n", ["assert greet('a') == 3"])
    assert result.score == 1.0 and result.details["tests_run"]["stdout_excerpt"] == "hi a\n"


def test_captured_output_is_capped_and_keeps_its_start(verifier):
    code = "def spam():\n    print('x' * 5_000_000)\n    return 1\n"
    test = (
        "import io\nfrom contextlib import redirect_stdout\nb = io.StringIO()\nwith redirect_stdout(b):\n"
        "    r = spam()\nassert r == 1 and b.getvalue() == 'x' * 2_097_152, len(b.getvalue())"
    )
    result = judge(verifier, code, [test])
    assert result.score == 1.0, result.details


def test_a_test_that_seeds_only_its_own_inputs_is_unchanged(verifier):
    test = "import random\nrandom.seed(1)\nxs = [random.random() for _ in range(5)]\nassert total(xs) == sum(xs)"
    assert judge(verifier, "def total(xs):\n    return sum(xs)\n", [test]).score == 1.0


def test_the_seed_is_not_a_call_into_the_program(verifier):
    result = judge(verifier, "def f():\n    return 1\n", ["import random\nrandom.seed(1)\nassert 1 == 1"])
    assert result.score == 0.0 and result.details["checks"][0]["reason"] == "the test made no call into the program"


def test_unittest_main_with_no_case_or_a_case_the_program_cannot_skip_fails(verifier):
    assert judge(verifier, "def add(a, b):\n    return a + b\n", ["import unittest\nunittest.main()\n"]).score == 0.0
    skipper = "import unittest\ndef add(a, b):\n    raise unittest.SkipTest('no')\n"
    assert judge(verifier, skipper, [UNITTEST]).score == 0.0


def test_a_case_that_takes_an_argument_is_not_run(verifier):
    test = "def test_add(tmp_path):\n    assert add(1, 2) == 3\n"
    result = judge(verifier, "def add(a, b):\n    return a + b\n", [test])
    assert result.score == 0.0 and result.details["checks"][0]["reason"] == "the test made no call into the program"


def test_cases_a_test_ran_itself_are_not_run_twice(verifier):
    code = "n = []\ndef add(a, b):\n    n.append(1)\n    return len(n)\n"
    test = "def test_once():\n    assert add(1, 2) == 1\n\ntest_once()\n"
    assert judge(verifier, code, [test]).score == 1.0


@pytest.mark.parametrize(
    "payload",
    [
        b'["printed","hi bob\\n",null]',  # a capture frame the judge did not ask for is the answer: malformed
        b'["ok",["i","3"],null]',
    ],
)
def test_forged_frames_on_an_unredirected_call_gain_nothing(verifier, payload):
    code = forged(payload).replace("def f(xs):", "def greet(xs):")
    test = "r = greet('bob')\nassert r in (3, None)"
    honest = payload == b'["ok",["i","3"],null]'  # the honest form of the answer passes, the other fails
    expected = 1.0 if honest else 0.0
    assert judge(verifier, code, [test]).score == expected


@pytest.mark.parametrize(
    "payload",
    [
        b'["ok",["i","3"],null]',  # no capture frame first: the answer is read where the capture belongs
        b'["printed",["s","hi"],null]',  # the text is not a string
        b'["printed","hi bob\\n","err"]',  # text for a stream the test did not redirect
    ],
)
def test_forged_capture_frames_fail_the_test(verifier, payload):
    code = forged(payload).replace("def f(xs):", "def greet(xs):")
    result = judge(verifier, code, [REDIRECT])
    assert result.score == 0.0 and "malformed" in result.details["checks"][0]["reason"], result.details


def test_a_frame_forged_ahead_of_a_seed_fails_the_test(verifier):
    # the first call writes its answer and one frame more: read as the seed's acknowledgement, it is not one
    frame = b'["ok",["i","1"],null]'
    code = forged(frame + b"%d\n" % len(frame) + frame).replace("def f(xs):", "def roll():")
    test = "import random\nassert roll() == 1\nrandom.seed(3)\nassert roll() == 1"
    result = judge(verifier, code, [test])
    assert result.score == 0.0 and "malformed" in result.details["checks"][0]["reason"], result.details


def test_an_in_place_call_in_an_expression_is_written_back_through_a_keyword_argument(verifier):
    # scored 0 on 64ddcfe: only a positional variable argument marked a call in an expression for write-back
    test = "lst = [3, 1, 2]\nassert sort_in_place(xs=lst) is None\nassert lst == [1, 2, 3]"
    assert judge(verifier, "def sort_in_place(xs):\n    xs.sort()\n", [test]).score == 1.0
    assert judge(verifier, "def sort_in_place(xs):\n    xs.reverse()\n", [test]).score == 0.0
    returns = "lst = [3, 1, 2]\nres = sort(xs=lst)\nassert res == sorted(lst)"  # returned a value: not written back
    assert judge(verifier, "def sort(xs):\n    xs.clear()\n    return []\n", [returns]).score == 0.0
