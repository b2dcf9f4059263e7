"""The judge never shares a process with the program: the review's attacks A–E, each scoring 0 (or unscorable for a
row that cannot be judged across the boundary), and right answers of the same shapes scoring 1."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(), max_workers=2)


def run(verifier: CodeVerifier, code: str, tests: list[str]):
    return verifier.verify(f"```python\n{code}\n```", tests=tests)


def score(verifier: CodeVerifier, code: str, tests: list[str]) -> float | None:
    return run(verifier, code, tests).score


# HumanEval 32's shape: a helper of the dataset, a loop over random inputs, one assert inside it
POLY_TEST = """
import math

def poly(xs, x):
    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))

def check(candidate):
    import random
    rng = random.Random(42)
    for _ in range(30):
        coeffs = [rng.randint(-10, 10) or 1 for _ in range(2 * rng.randint(1, 4))]
        solution = candidate(list(coeffs))
        assert math.fabs(poly(coeffs, solution)) < 1e-4

check(find_zero)
"""
FIND_ZERO = """
def poly(xs, x):
    return sum(c * x ** i for i, c in enumerate(xs))

def find_zero(xs):
    lo, hi = -1.0, 1.0
    while poly(xs, lo) * poly(xs, hi) > 0:
        lo, hi = lo * 2, hi * 2
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        if poly(xs, mid) * poly(xs, lo) > 0:
            lo = mid
        else:
            hi = mid
    return lo
"""

# A: forge the report of the process that runs the program — every descriptor it holds
FORGE = """
import os

def _forge():
    frames = [b'["end"]\\n', b'x ENTRY 0 0 0 9\\n["pass",1]x DONE 1\\n', b'8\\n["pass"]', b'12\\n["ok",null,null]']
    for fd in range(3, 64):
        for frame in frames:
            try:
                os.write(fd, frame)
            except OSError:
                pass
        try:
            r, w = os.pipe()
            os.close(r)
            os.dup2(w, fd)
        except OSError:
            pass
"""


def test_a_forged_report_of_the_programs_process_is_not_a_verdict(verifier):
    assert score(verifier, FIND_ZERO, [POLY_TEST]) == 1.0  # the dataset's helper and loop, judged in the judge
    forged = FORGE + "def find_zero(xs):\n    _forge()\n    return None\n"
    assert score(verifier, forged, [POLY_TEST]) == 0.0
    at_import = FORGE + "_forge()\ndef find_zero(xs):\n    return None\n"
    assert score(verifier, at_import, [POLY_TEST]) == 0.0


def test_a_hard_coded_fixed_asserts_then_a_forge_at_the_first_unknown_input(verifier):
    test = (
        "import random\ndef check(candidate):\n    assert candidate(0, 1) == 1\n    assert candidate(5, 7) == 12\n"
        "    for _ in range(20):\n        x, y = random.randint(0, 1000), random.randint(0, 1000)\n"
        "        assert candidate(x, y) == x + y\n\ncheck(add)\n"
    )
    known = FORGE + "def add(x, y):\n    answers = {(0, 1): 1, (5, 7): 12}\n    if (x, y) in answers:\n"
    known += "        return answers[(x, y)]\n    _forge()\n    import os\n    os._exit(0)\n"
    assert score(verifier, known, [test]) == 0.0
    assert score(verifier, "def add(x, y):\n    return x + y\n", [test]) == 1.0


ANYTHING = """
class _Anything:
    __eq__ = lambda self, other: True
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    __ne__ = lambda self, other: False
    __hash__ = lambda self: 0
    __sub__ = __rsub__ = lambda self, other: 0
    __abs__ = lambda self: 0
    __len__ = lambda self: 0
    __iter__ = lambda self: iter(())
    __bool__ = lambda self: True
"""
SHADOWED = ("abs", "sorted", "set", "len", "tuple", "round", "isinstance", "list", "str", "all", "any", "sum")
B_TESTS = [
    "assert abs(f(1) - 2.0) < 1e-6",
    "assert sorted(f([3, 1, 2])) == [1, 2, 3]",
    "assert set(f([1, 2])) == {1, 2}",
    "assert len(f('ab')) == 2",
]


@pytest.mark.parametrize(
    "shadow",
    [
        "\n".join(f"[0 for {name} in ()]" for name in SHADOWED),  # binds nothing at module level in Python 3
        "\n".join(f"{name} = {name}" for name in SHADOWED),  # really rebinds them in the program's module
        "import builtins\n" + "\n".join(f"builtins.{name} = lambda *a, **k: _Anything()" for name in SHADOWED),
    ],
    ids=["comprehension target", "module rebinding", "builtins patched"],
)
def test_b_the_programs_source_does_not_change_how_a_test_is_judged(verifier, shadow):
    for returned in ("None", "_Anything()"):
        program = f"{ANYTHING}\n{shadow}\ndef f(x):\n    return {returned}\n"
        result = run(verifier, program, B_TESTS)
        assert result.score == 0.0, (shadow, returned, result.details["checks"])
        assert not any(c["passed"] for c in result.details["checks"])
    right = "\n".join(f"[0 for {name} in ()]" for name in SHADOWED)
    right += "\ndef f(x):\n    return 2.0 if x == 1 else sorted(x) if isinstance(x, list) else x\n"
    assert score(verifier, right, B_TESTS) == 1.0


C_TESTS = [
    "s = 'hello world'\nassert decode(encode(s)) == s",
    "x = [3, 1, 2]\nassert identity(x) == x",
    "lst = [3, 1, 2]\nassert sort(lst) == sorted(lst)",
]
C_ATTACKS = {
    "global statement": "def encode(s):\n    global s\n    return None\n",
    "name-agnostic walk over globals": """
import sys
_set = dict.__setitem__
def _wipe():
    frame = sys._getframe(1)
    while frame is not None:
        for name, value in list(frame.f_globals.items()):
            if not name.startswith('__') and not callable(value) and type(value).__name__ != 'module':
                _set(frame.f_globals, name, None)
        frame = frame.f_back
""",
}


@pytest.mark.parametrize("attack", sorted(C_ATTACKS))
def test_c_the_tests_constants_are_never_read_back_from_the_program(verifier, attack):
    wipe = C_ATTACKS[attack] if "walk" in attack else "def _wipe():\n    global s, x, lst\n    s = x = lst = None\n"
    program = wipe + (
        "def encode(s):\n    _wipe()\n    return None\ndef decode(s):\n    _wipe()\n    return None\n"
        "def identity(v):\n    _wipe()\n    if isinstance(v, list):\n        v.clear()\n    return None\n"
        "def sort(v):\n    v.clear()\n    return []\n"
    )
    result = run(verifier, program, C_TESTS)
    assert result.score == 0.0
    assert [c["passed"] for c in result.details["checks"]] == [False, False, False]
    right = "def encode(s):\n    return s[::-1]\ndef decode(s):\n    return s[::-1]\ndef identity(v):\n    return v\n"
    right += "def sort(v):\n    return sorted(v)\n"
    assert score(verifier, right, C_TESTS) == 1.0


def test_a_statement_call_writes_the_programs_changes_back_into_its_arguments(verifier):
    tests = ["x = [3, 1, 2]\nsort_in_place(x)\nassert x == [1, 2, 3]"]
    assert score(verifier, "def sort_in_place(v):\n    v.sort()\n", tests) == 1.0
    assert score(verifier, "def sort_in_place(v):\n    pass\n", tests) == 0.0


def test_d_a_value_that_is_slow_to_hash_does_not_stall_the_host():
    verifier = CodeVerifier(limits=small_sandbox_limits(wall_timeout_s=3.0, cpu_time_s=3), max_workers=1)
    colliding = "def f(x):\n    return [1 + k * (2 ** 61 - 1) for k in range(28_000)]\n"  # one hash for all
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    ticker = threading.Thread(target=tick)
    ticker.start()
    cpu = time.process_time()
    try:
        results = [
            run(verifier, colliding, [t]) for t in ("assert set(f(1)) == {1, 2}", "assert len(frozenset(f(1))) == 2")
        ]
    finally:
        stop.set()
        ticker.join()
    assert [r.score for r in results] == [0.0, 0.0]
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(gaps) < 1.0  # the host's threads kept running: nothing held the GIL for a second
    assert time.process_time() - cpu < 2.0  # the hashing happened in the judge, not here


E_RIGHT = [
    ("def f(x):\n    return 'abc'\n", ["assert f(1).startswith('a')", "assert f(1).upper() == 'ABC'"]),
    ("def f(x):\n    return {}.keys()\n", ["assert not f(1)"]),
    ("def f(x):\n    return {'a': 1}.keys()\n", ["assert f(1) == {'a'}"]),
    ("def f(x):\n    return 'a\\u2028b\\u2029c\\x85d'\n", ["assert f(1) == 'a\\u2028b\\u2029c\\x85d'"]),
    ("def f(x):\n    return 7 ** 9000\n", ["assert f(1) == 7 ** 9000"]),
    ("def f(x):\n    return [' a ', 'b']\n", ["assert [s.strip() for s in f(1)] == ['a', 'b']"]),
]


@pytest.mark.parametrize("case", range(len(E_RIGHT)))
def test_e_right_answers_of_the_shapes_that_were_false_negatives_score_one(verifier, case):
    code, tests = E_RIGHT[case]
    result = run(verifier, code, tests)
    assert result.score == 1.0, result.details


def test_e_a_class_in_place_of_the_function_does_not_answer_for_str(verifier):
    program = "class f:\n    def __init__(self, x):\n        pass\n    def startswith(self, p):\n        return True\n"
    assert score(verifier, program, ["assert f(1).startswith('a')"]) == 0.0
    views = "def f(x):\n    return {'a': 1}.keys()\n"
    assert score(verifier, views, ["assert not f(1)"]) == 0.0  # a non-empty view is truthy, as in Python


def test_objects_the_dataset_asks_for_are_handles_in_the_program(verifier):
    program = "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n"
    program += "        self.items.append(x)\n    def pop(self):\n        return self.items.pop()\n"
    test = "s = Stack()\ns.push(1)\ns.push(2)\nassert s.pop() == 2\nassert s.pop() == 1"
    # the dataset says Stack is a class (its calls may return objects) with these methods (all a handle answers)
    reference = "class Stack:\n    def push(self, x):\n        pass\n    def pop(self):\n        pass\n"
    answer = verifier.verify(f"```python\n{program}\n```", tests=[test], reference=reference)
    assert answer.score == 1.0, answer.details
    wrong = program.replace("self.items.pop()", "self.items[0]")
    assert verifier.verify(f"```python\n{wrong}\n```", tests=[test], reference=reference).score == 0.0
    assert score(verifier, program, [test]) == 0.0  # without the reference no object may come back


def test_exceptions_of_the_program_reach_the_test_as_builtin_exceptions(verifier):
    test = "try:\n    f(-1)\n    raise AssertionError('no error')\nexcept ValueError:\n    pass"
    assert score(verifier, "def f(x):\n    raise ValueError(x)\n", [test]) == 1.0
    assert score(verifier, "class E(ValueError):\n    pass\ndef f(x):\n    raise E(x)\n", [test]) == 1.0
    assert score(verifier, "def f(x):\n    return 0\n", [test]) == 0.0
    assert score(verifier, "import sys\ndef f(x):\n    sys.exit(0)\n", [test]) == 0.0
    message = "try:\n    f(-1)\nexcept ValueError as err:\n    assert err.args == ('negative', -1)"
    assert score(verifier, "def f(x):\n    raise ValueError('negative', x)\n", [message]) == 1.0
    # StopIteration would end the test's own iteration early: all(map(f, xs)) would check nothing
    stop = "def f(x):\n    raise StopIteration\n"
    assert score(verifier, stop, ["assert all(map(f, [1, 2, 3]))", "assert list(map(f, [1])) == []"]) == 0.0


def test_a_row_that_hands_the_program_a_function_is_weak_and_unscorable(verifier):
    tests = ["assert apply(lambda v: v + 1, 1) == 2", "assert apply2(3) == 3"]
    program = "def apply(g, v):\n    return g(v)\ndef apply2(v):\n    return v\n"
    result = run(verifier, program, tests)
    assert (result.score, result.anomaly, result.details["weak_tests"]) == (None, "weak_test", [0])
    assert CodeVerifier.weak_tests_of(tests) == {0: result.details["weak_reasons"][0]}
    skipping = CodeVerifier(limits=small_sandbox_limits(), weak_tests="skip")
    skipped = skipping.verify(f"```python\n{program}\n```", tests=tests)
    assert skipped.score == 1.0 and [c["index"] for c in skipped.details["checks"]] == [1]
    # found only at run time: an argument computed by the test that is not plain data
    runtime = ["def make():\n    return lambda v: v\nassert apply(make(), 1) == 1"]
    assert CodeVerifier.weak_tests_of(runtime) == {}
    late = run(verifier, program, runtime)
    assert (late.score, late.anomaly) == (None, "weak_test")
    with pytest.raises(ValueError, match="weak_tests"):
        CodeVerifier(weak_tests="trust")


SCAN_MEMORY = """
import ctypes, gc, re

def _find():
    pattern = re.compile(rb"SECRET-[0-9]+")
    with open("/proc/self/maps") as maps:
        for line in maps:  # every writable private region of this process: heap, stacks, the interpreter's arenas
            fields = line.split()
            if fields[1] != "rw-p" or (len(fields) > 5 and fields[5].startswith("[v")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            found = pattern.search(ctypes.string_at(start, min(end - start, 1 << 26)))
            if found:
                return found.group().decode()
    for obj in gc.get_objects():  # and every object the interpreter tracks, frames included
        if isinstance(obj, str) and "SECRET-" in obj:
            return re.search("SECRET-[0-9]+", obj).group()
    return None

def f(x):
    return _find()
"""


def test_the_expected_values_are_nowhere_in_the_programs_process(verifier):
    tests = ["assert f(1) == 'SECRET-' + '4' + '2'", "assert f(2) == 'SECRET-1234567'"]
    result = run(verifier, SCAN_MEMORY, tests)
    assert result.score == 0.0 and [c["reason"] for c in result.details["checks"]] == ["AssertionError"] * 2
    # the scan itself works: a value the program holds is found
    found = run(verifier, SCAN_MEMORY + "_MINE = 'SECRET-' + str(7)\n", ["assert f(1) == 'SECRET-7'"])
    assert found.score == 1.0, found.details
