"""How the judge interprets a test's names and values (issue 33's classes): only a right answer earns the reward,
and right answers of every shape that used to score 0 now pass. Each case runs the real sandboxed verifier."""

from __future__ import annotations

import shutil
import warnings

import datasets
import pytest

from trl_loo_gspo.experiment.data import map_humaneval, map_mbpp, prepare_dataset
from trl_loo_gspo.verifiers.code.test_plan import plan_test, program_names
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(), max_workers=2)


@pytest.fixture(scope="module")
def skipping() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(), max_workers=2, weak_tests="skip")


def judge(verifier: CodeVerifier, code: str, tests: list[str], **columns):
    return verifier.verify(f"```python\n{code}\n```", tests=tests, **columns)


# -- A: a pass means the judge evaluated the program's own outputs ---------------------------------------------


@needs_bwrap
@pytest.mark.parametrize("entry", ["pow", "abs", "max", "sorted", "sum"])
def test_a_a_builtin_named_entry_point_is_always_the_programs(verifier, entry):
    tests = {
        "pow": ["assert pow(2, 3) == 8"],
        "abs": ["assert abs(-3) == 3"],
        "max": ["assert max([1, 5, 2]) == 5"],
        "sorted": ["assert sorted([3, 1, 2]) == [1, 2, 3]"],
        "sum": ["assert sum([1, 2, 3]) == 6"],
    }[entry]
    right = {
        "pow": "def pow(a, b):\n    return a ** b\n",
        "abs": "def abs(x):\n    return -x if x < 0 else x\n",
        "max": "def max(xs):\n    best = xs[0]\n    for x in xs:\n        best = x if x > best else best\n    return best\n",  # noqa: E501
        "sorted": "def sorted(xs):\n    out = list(xs)\n    out.sort()\n    return out\n",
        "sum": "def sum(xs):\n    t = 0\n    for x in xs:\n        t += x\n    return t\n",
    }[entry]
    columns = {"entry_points": [entry]}
    assert judge(verifier, "answer = 42\n", tests, **columns).score == 0.0
    assert judge(verifier, f"def {entry}(*args):\n    return 0\n", tests, **columns).score == 0.0
    assert judge(verifier, right, tests, **columns).score == 1.0


@needs_bwrap
def test_a_a_test_that_never_calls_the_program_does_not_pass(verifier):
    # no entry points declared: pow is the builtin, so nothing of the program is called
    result = judge(verifier, "answer = 42\n", ["assert pow(2, 3) == 8"])
    assert result.score == 0.0
    assert result.details["checks"][0]["reason"] == "the test made no call into the program"
    assert judge(verifier, "def f(x):\n    return x\n", ["assert True", "assert f(1) == 1"]).score == 0.0


# -- B: which names are the program's is decided from the dataset ----------------------------------------------

FAKE_NP = (
    "class np:\n    @staticmethod\n    def allclose(a, b):\n        return True\ndef scale(xs, k):\n    return None\n"
)
NP_TEST = ["assert np.allclose(scale([1.0, 2.0], 2), [2.0, 4.0])"]
COUNTER_TEST = ["assert count('aab') == Counter({'a': 2, 'b': 1})"]
FAKE_COUNTER = "def Counter(d):\n    return 1\ndef count(s):\n    return 1\n"


@needs_bwrap
@pytest.mark.parametrize("declared", [False, True], ids=["inferred", "declared"])
def test_b_a_free_name_the_dataset_does_not_define_makes_the_row_unscorable(verifier, declared):
    np_cols = {"entry_points": ["scale"]} if declared else {}
    counter_cols = {"entry_points": ["count"]} if declared else {}
    for code, tests, cols, name in (
        (FAKE_NP, NP_TEST, np_cols, "np"),
        (FAKE_COUNTER, COUNTER_TEST, counter_cols, "Counter"),
    ):
        result = judge(verifier, code, tests, **cols)
        assert (result.score, result.anomaly) == (None, "undefined_name"), result.details
        assert repr(name) in result.details["undefined_reasons"][0]
    # the dataset's own import makes it judgeable: the real Counter, and a right answer of that type passes
    imported = ["from collections import Counter\n" + COUNTER_TEST[0]]
    assert judge(verifier, FAKE_COUNTER, imported, **counter_cols).score == 0.0
    right = "from collections import Counter\ndef count(s):\n    return Counter(s)\n"
    assert judge(verifier, right, imported, **counter_cols).score == 1.0


def test_b_prepare_dataset_counts_and_names_undefined_rows():
    rows = {"prompt": ["p", "q"], "tests": [NP_TEST, ["assert f(1) == 1"]]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare_dataset(datasets.Dataset.from_dict(rows), "code", mapper="identity")
    messages = [str(w.message) for w in caught if "undefined_name" in str(w.message)]
    assert len(messages) == 1 and "1 of 2 code rows" in messages[0] and "'np'" in messages[0]


def test_b_the_dataset_mappers_declare_the_programs_names():
    humaneval = map_humaneval(
        {
            "prompt": "def pow(a, b):\n    '''a ** b'''\n",
            "test": "def check(c):\n    assert c(2, 3) == 8\n",
            "entry_point": "pow",
        }
    )
    assert humaneval["entry_points"] == ["pow"]
    names = program_names(humaneval)
    assert plan_test(humaneval["tests"][0], names.entry_points, names.classes).remote == ("pow",)
    mbpp = map_mbpp({"text": "t", "code": "class Pair:\n    pass\ndef max_chain(p):\n    pass\n", "test_list": ["x"]})
    assert program_names(mbpp) == type(names)(("Pair", "max_chain"), ("Pair",))


# -- forced None: a value from the program that cannot cross fails the test --------------------------------------

FORGE_LONG_ITERATOR = """
import os, stat
def _answer_pipe():
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and os.get_blocking(fd) is not None:
                import fcntl
                if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                    return fd
        except OSError:
            pass
def run_length_encode(s):
    fd = _answer_pipe()
    payload = b'["ok",["it",[' + b','.join([b'["i","1"]'] * 1_200_000) + b']],null]'
    os.write(fd, b"%d\\n" % len(payload) + payload)
    import time
    time.sleep(30)
def run_length_decode(code):
    return ''
"""


@needs_bwrap
def test_forced_none_a_forged_long_iterator_fails_and_is_never_weak(verifier, skipping):
    row = map_mbpp(
        {"text": "t", "code": "def run_length_encode(s):\n    pass\ndef run_length_decode(c):\n    pass\n",
         "test_list": ["s = 'aaabccdddd'\nassert run_length_decode(run_length_encode(s)) == s"]}
    )  # fmt: skip
    for v in (verifier, skipping):
        result = judge(v, FORGE_LONG_ITERATOR, row["tests"], reference=row["reference"])
        assert result.score == 0.0 and result.anomaly != "weak_test", result.details


NEST = (
    "def nest(n):\n    v = []\n    for _ in range(100):\n        v = [v]\n    return v\ndef depth(xs):\n    return 1\n"
)


@needs_bwrap
def test_forced_none_a_value_too_deep_to_send_back_is_the_programs_fault(verifier, skipping):
    tests = ["assert depth([nest(3)]) == 3"]
    for v in (verifier, skipping):
        result = judge(v, NEST, tests)
        assert result.score == 0.0 and result.anomaly is None, result.details
        assert "cannot be sent" in result.details["checks"][0]["reason"]


@needs_bwrap
def test_forced_none_a_handle_inside_a_list_crosses_back(verifier):
    reference = "class Make_Item:\n    pass\ndef Total(items):\n    pass\n"
    code = "class Make_Item:\n    def __init__(self, v):\n        self.v = v\ndef Total(items):\n"
    code += "    return sum(i.v for i in items)\n"
    tests = ["assert Total([Make_Item(3), Make_Item(4)]) == 7"]
    assert judge(verifier, code, tests, reference=reference).score == 1.0
    assert judge(verifier, code.replace("sum(", "max(0, -1, *"), tests, reference=reference).score == 0.0


# -- objects only where the dataset's reference returns one -------------------------------------------------------

LIAR_CLASS = "class Remove_Spaces:\n    def __init__(self, s):\n        pass\n    def startswith(self, p):\n"
LIAR_CLASS += "        return True\n    def isalpha(self):\n        return True\n"


@needs_bwrap
def test_objects_come_back_only_from_the_references_classes(verifier):
    tests = ["assert Remove_Spaces('a b c').startswith('abc')", "assert Remove_Spaces('a b').isalpha()"]
    assert judge(verifier, LIAR_CLASS, tests).score == 0.0
    reference = "def Remove_Spaces(s):\n    return s.replace(' ', '')\n"  # a function of the dataset: no object
    assert judge(verifier, LIAR_CLASS, tests, reference=reference).score == 0.0
    right = "def Remove_Spaces(s):\n    return s.replace(' ', '')\n"
    assert judge(verifier, right, tests, reference=reference).score == 1.0


# -- the false negatives: right programs of each shape score 1.0 ------------------------------------------------

RIGHT = {
    "range": ("def evens(n):\n    return range(0, n, 2)\n", ["assert evens(6) == range(0, 6, 2)"], {}),
    "namedtuple": (
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef origin():\n    return P(0, 0)\n",
        ["assert origin() == (0, 0)"],
        {"entry_points": ["origin"]},
    ),
    "Fraction": (
        "from fractions import Fraction\ndef half(n):\n    return Fraction(n, 2)\n",
        ["from fractions import Fraction\nassert half(3) == Fraction(3, 2) and half(3).denominator == 2"],
        {},
    ),
    "itertools": (
        "import itertools\ndef pairs(xs):\n    return itertools.combinations(xs, 2)\n",
        ["assert list(pairs([1, 2, 3])) == [(1, 2), (1, 3), (2, 3)]"],
        {},
    ),
    "infinite generator": (
        "def naturals():\n    n = 0\n    while True:\n        yield n\n        n += 1\n",
        ["import itertools\nassert list(itertools.islice(naturals(), 5)) == [0, 1, 2, 3, 4]"],
        {},
    ),
    "dict.keys order": (
        "def keys(d):\n    return d.keys()\n",
        ["assert list(keys({'b': 1, 'a': 2})) == ['b', 'a']"],
        {},
    ),
    "Counter.most_common": (
        "from collections import Counter\ndef tally(s):\n    return Counter(s)\n",
        ["assert tally('aab').most_common(1) == [('a', 2)]"],
        {},
    ),
    "defaultdict default": (
        "from collections import defaultdict\ndef groups(xs):\n    d = defaultdict(list)\n"
        "    for x in xs:\n        d[x % 2].append(x)\n    return d\n",
        ["assert groups([1, 3])[0] == []"],
        {},
    ),
    "__main__ block with input()": (
        "def double(x):\n    return 2 * x\n\nif __name__ == '__main__':\n    print(double(int(input())))\n",
        ["assert double(4) == 8"],
        {},
    ),
    "named like a stdlib module": (
        "def calendar(year):\n    return year % 4 == 0\n",
        ["assert calendar(2024) is True"],
        {},
    ),
    "attribute of a returned object": (
        "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n",
        ["p = Point(1, 2)\nassert p.x == 1 and p.y == 2"],
        {"reference": "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"},
    ),
    "len of a returned object": (
        "class Bag:\n    def __init__(self, *xs):\n        self.xs = list(xs)\n    def __len__(self):\n"
        "        return len(self.xs)\n",
        ["assert len(Bag(1, 2, 3)) == 3"],
        {"reference": "class Bag:\n    def __len__(self):\n        pass\n"},
    ),
    "in-place mutation after a non-statement call": (
        "def sort_in_place(xs):\n    xs.sort()\n",
        [
            "xs = [3, 1, 2]\nassert sort_in_place(xs) is None\nassert xs == [1, 2, 3]",
            "ys = [2, 1]\nr = sort_in_place(ys)\nassert ys == [1, 2]",
        ],
        {},
    ),  # fmt: skip
}


@needs_bwrap
@pytest.mark.parametrize("shape", sorted(RIGHT))
def test_false_negatives_a_right_program_of_each_shape_passes(verifier, shape):
    code, tests, columns = RIGHT[shape]
    result = judge(verifier, code, tests, **columns)
    assert result.score == 1.0, result.details


WRONG = {
    "range": ("def evens(n):\n    return range(0, n + 2, 2)\n", ["assert evens(6) == range(0, 6, 2)"]),
    "empty view is falsy": ("def f(x):\n    return {}.values()\n", ["assert f(1)"]),
    "infinite generator": (
        "def naturals():\n    n = 0\n    while True:\n        yield n\n        n += 2\n",
        ["import itertools\nassert list(itertools.islice(naturals(), 5)) == [0, 1, 2, 3, 4]"],
    ),
    "in-place mutation": ("def sort_in_place(xs):\n    return None\n", ["xs = [3, 1]\nassert sort_in_place(xs) is None\nassert xs == [1, 3]"]),  # noqa: E501
    "a call that returned a value is not written back": (
        "def sort(xs):\n    xs.clear()\n    return []\n",
        ["lst = [3, 1, 2]\nres = sort(lst)\nassert res == sorted(lst)"],
    ),
    "mutation read twice is not written back": ("def f(xs):\n    xs.clear()\n    return []\n", ["xs = [1]\nassert f(xs) == xs"]),  # noqa: E501
}  # fmt: skip


@needs_bwrap
@pytest.mark.parametrize("shape", sorted(WRONG))
def test_wrong_programs_of_those_shapes_still_fail(verifier, shape):
    code, tests = WRONG[shape]
    assert judge(verifier, code, tests).score == 0.0


# -- found by a red-team pass on this judge ---------------------------------------------------------------------

LYING_RESULT = "class Yes:\n    def __getattr__(self, name):\n        return lambda *a, **k: True\n"
LYING_RESULT += "class Solution:\n    def reverseWords(self, s):\n        return Yes()\n"
WORDS_REFERENCE = "class Solution:\n    def reverseWords(self, s):\n        return ' '.join(reversed(s.split()))\n"


@needs_bwrap
def test_a_handle_answers_only_the_members_the_reference_defines(verifier):
    tests = ["assert Solution().reverseWords('the sky is blue').startswith('blue')"]
    assert judge(verifier, LYING_RESULT, tests, reference=WORDS_REFERENCE).score == 0.0
    right = "class Solution:\n    def reverseWords(self, s):\n        return ' '.join(reversed(s.split()))\n"
    assert judge(verifier, right, tests, reference=WORDS_REFERENCE).score == 1.0


@needs_bwrap
def test_a_program_that_dies_under_a_broad_except_cannot_make_the_test_weak(verifier):
    tests = [
        "class Node:\n    def __init__(self, v, nxt=None):\n        self.v, self.nxt = v, nxt\n"
        "try:\n    assert length(None) == 0\nexcept:\n    pass\n"
        "assert length(Node(1, Node(2))) == 2"
    ]
    result = judge(verifier, "import os\ndef length(h):\n    os._exit(0)\n", tests, entry_points=["length"])
    assert result.score == 0.0 and result.anomaly != "weak_test", result.details


@needs_bwrap
def test_lazy_iterators_keep_their_items_and_do_not_run_far_ahead(verifier):
    # two items, then an error: both items arrive before it
    twice = "def gen():\n    yield 1\n    yield 2\n    raise ValueError('done')\n"
    test = "g = gen()\nassert next(g) == 1 and next(g) == 2\ntry:\n    next(g)\nexcept ValueError:\n    pass\n"
    assert judge(verifier, twice, [test]).score == 1.0
    # an iterator the judge read ahead goes back to the program with the items it held
    rest = "def nums():\n    return iter(range(1, 6))\ndef take(it):\n    return list(it)\n"
    rest = rest.replace("iter(range(1, 6))", "(x for x in range(1, 6))")
    test = "it = nums()\nassert next(it) == 1\nassert next(it) == 2\nassert take(it) == [3, 4, 5]"
    assert judge(verifier, rest, [test]).score == 1.0
    # the next item of this generator is far away: the batch stops after the items the test takes
    slow = "import time\ndef gen():\n    yield 1\n    yield 2\n    time.sleep(30)\n    yield 3\n"
    test = "import itertools\nassert list(itertools.islice(gen(), 2)) == [1, 2]"
    assert judge(verifier, slow, [test]).score == 1.0


@needs_bwrap
def test_a_statement_call_through_a_test_variable_writes_back(verifier):
    reference = "class Solution:\n    def rotate(self, m):\n        pass\n"
    code = "class Solution:\n    def rotate(self, m):\n        m[:] = [list(r) for r in zip(*m[::-1])]\n"
    tests = ["sol = Solution()\nm = [[1, 2], [3, 4]]\nsol.rotate(m)\nassert m == [[3, 1], [4, 2]]"]
    assert judge(verifier, code, tests, reference=reference).score == 1.0
    alias = ["g = sort_in_place\nxs = [2, 1]\ng(xs)\nassert xs == [1, 2]"]
    assert judge(verifier, "def sort_in_place(v):\n    v.sort()\n", alias).score == 1.0


def test_common_lower_case_function_names_are_not_forgotten_imports():
    assert plan_test("assert add(1, 2) == 3\nassert sub(3, 1) == 2").undefined is None
    assert plan_test("assert mean([1, 3]) == 2 and gcd(4, 6) == 2").undefined is None
    assert "deque" in (plan_test("assert f([1]) == deque([1])").undefined or "")
