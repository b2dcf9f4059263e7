"""Issue #45: a numpy scalar the program returns crosses the wire as the Python number it holds.

``return np.max(l)`` (an ``np.int64``) scored 0 on HumanEval/35 (``unserialisable: int64``) where ``int(np.max(l))``
scored 1. The candidate's encoder (``wire_codec(numpy_scalars=True)``, built in :func:`run_candidate`) now sends a
numpy scalar as the int, float, bool or complex that ``numpy.generic.item`` gives; the judge's codec never converts
and never imports numpy. An ndarray stays not plain (``[1, 2] == np.array([1, 2])`` is an array, not a bool: the
test could not tell it from a list), and an object that only claims to be numpy's gains nothing.
"""

from __future__ import annotations

import sys

import pytest

from trl_loo_gspo.sandbox.wire import wire_codec
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits
from .test_sandbox_packages import HE35, HE35_TESTS, fenced, needs_numpy
from .test_wire_issue45 import judge, needs_bwrap


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(), max_workers=2)


# -- the codec --------------------------------------------------------------------------------------------------


@needs_numpy
def test_the_candidate_codec_sends_numpy_scalars_as_python_numbers():
    import numpy as np

    encode, _, _ = wire_codec(numpy_scalars=True)
    _, decode, _ = wire_codec()
    cases = [
        (np.int64(-7), -7, int),
        (np.uint8(255), 255, int),
        (np.float32(1.5), 1.5, float),
        (np.float64(2.25), 2.25, float),
        (np.bool_(True), True, bool),
        (np.complex64(1 + 2j), 1 + 2j, complex),
    ]
    for value, expected, kind in cases:
        back = decode(encode(value))
        assert back == expected and type(back) is kind, value
    nested = decode(encode({np.int64(1): [np.bool_(False), (np.float64(0.5),)]}))
    assert nested == {1: [False, (0.5,)]} and type(next(iter(nested))) is int


@needs_numpy
def test_the_judge_codec_and_arrays_stay_strict():
    import numpy as np

    judge_encode, _, judge_unplain = wire_codec()
    with pytest.raises(judge_unplain, match="int64"):
        judge_encode(np.int64(1))  # the judge's codec: unchanged
    encode, _, unplain = wire_codec(numpy_scalars=True)
    for value in (np.array([1, 2]), np.datetime64("2024-01-01"), np.void(b"x")):
        with pytest.raises(unplain):
            encode(value)


def test_an_object_claiming_to_be_numpy_s_is_not_converted(monkeypatch):
    encode, _, unplain = wire_codec(numpy_scalars=True)
    liar = type("int64", (), {"__module__": "numpy", "item": lambda self: 3})()
    monkeypatch.delitem(sys.modules, "numpy", raising=False)  # not imported: no numpy scalar can exist
    with pytest.raises(unplain, match="int64"):
        encode(liar)
    fake = type(sys)("numpy")
    fake.generic = type("generic", (), {"item": lambda self: self.odd})
    monkeypatch.setitem(sys.modules, "numpy", fake)  # a fake numpy whose item() returns something odd
    for odd in ([3], "3", type("Eq", (int,), {"__eq__": lambda s, o: True})(3), None):
        oddball = type("int64", (fake.generic,), {"__module__": "numpy", "odd": odd})()
        with pytest.raises(unplain):
            encode(oddball)
    raising = type("int64", (fake.generic,), {"__module__": "numpy", "odd": property(lambda s: 1 // 0)})()
    with pytest.raises(unplain):
        encode(raising)


# -- through the real sandboxed verifier ------------------------------------------------------------------------

NP_RIGHT = "import numpy as np\n\ndef max_element(l: list):\n    return np.max(l)\n"
NP_WRONG = "import numpy as np\n\ndef max_element(l: list):\n    return np.min(l)\n"


@needs_bwrap
@needs_numpy
def test_a_numpy_scalar_answer_to_humaneval_35_scores_one(verifier):
    right = verifier.verify(fenced(NP_RIGHT), **HE35)
    assert (right.score, right.status) == (1.0, "pass"), right.details
    wrong = verifier.verify(fenced(NP_WRONG), **HE35)
    assert (wrong.score, [c["reason"] for c in wrong.details["checks"]]) == (0.0, ["AssertionError"])
    assert HE35_TESTS[0].count("assert") == 2


RIGHT = {
    "bool_ and float64 and nested int64": (
        "import numpy as np\ndef even(x):\n    return np.bool_(x % 2 == 0)\ndef mean(xs):\n    return np.mean(xs)\n"
        "def pair(xs):\n    return [np.int64(min(xs)), np.int64(max(xs))]\n",
        ["assert even(4) is True and even(3) is False",
         "assert mean([1, 2]) == 1.5",
         "assert pair([3, 1, 2]) == [1, 3]"],
    ),
}  # fmt: skip

WRONG = {
    "bool_ and float64 and nested int64": (
        "import numpy as np\ndef even(x):\n    return np.bool_(x % 2 == 1)\ndef mean(xs):\n    return np.sum(xs)\n"
        "def pair(xs):\n    return [np.int64(max(xs)), np.int64(min(xs))]\n",
        RIGHT["bool_ and float64 and nested int64"][1],
    ),
    "an ndarray stays not plain": (
        "import numpy as np\ndef pair(xs):\n    return np.array([min(xs), max(xs)])\n",
        ["assert pair([3, 1, 2]) == [1, 3]"],
    ),
    "a class that only claims numpy's module": (
        "class int64:\n    __module__ = 'numpy'\n    def item(self):\n        return 3\n"
        "def f(xs):\n    return int64()\n",
        ["assert f([1, 2, 3]) == 3"],
    ),
    "a subclass of np.int64 whose item() lies": (
        "import numpy as np\nclass Eq:\n    def __eq__(self, other):\n        return True\n"
        "class Liar(np.int64):\n    __module__ = 'numpy'\n    def item(self):\n        return Eq()\n"
        "def f(xs):\n    return Liar(0)\n",
        ["assert f([1, 2, 3]) == 3"],
    ),
    "a fake numpy module": (
        "import sys\nclass Eq:\n    def __eq__(self, other):\n        return True\n"
        "class generic:\n    def item(self):\n        return Eq()\n"
        "fake = type(sys)('numpy')\nfake.generic = generic\nsys.modules['numpy'] = fake\n"
        "class int64(generic):\n    __module__ = 'numpy'\n"
        "def f(xs):\n    return int64()\n",
        ["assert f([1, 2, 3]) == 3"],
    ),
    "item() raising": (
        "import numpy as np\nclass generic:\n    def item(self):\n        raise SystemExit(0)\n"
        "import sys\nfake = type(sys)('numpy')\nfake.generic = generic\nsys.modules['numpy'] = fake\n"
        "class int64(generic):\n    __module__ = 'numpy'\n"
        "def f(xs):\n    return int64()\n",
        ["assert f([1, 2, 3]) == 3"],
    ),
}  # fmt: skip


@needs_bwrap
@needs_numpy
@pytest.mark.parametrize("shape", sorted(RIGHT))
def test_right_numpy_scalar_programs_pass(verifier, shape):
    code, tests = RIGHT[shape]
    result = judge(verifier, code, tests)
    assert result.score == 1.0, result.details


@needs_bwrap
@needs_numpy
@pytest.mark.parametrize("shape", sorted(WRONG))
def test_wrong_or_hostile_numpy_programs_score_zero(verifier, shape):
    code, tests = WRONG[shape]
    result = judge(verifier, code, tests)
    assert result.score == 0.0, result.details
    assert result.status != "error", result.details  # the judge decided: nothing crashed it
