"""The judge/candidate wire format and the host's test plans, without a sandbox."""

from __future__ import annotations

import collections
import decimal
import fractions
import itertools
import os

import pytest

from trl_loo_gspo.sandbox.wire import WIRE_MAX_DEPTH, WIRE_MAX_ITEMS, WireReader, wire_codec, wire_parser, wire_writer
from trl_loo_gspo.verifiers.code.test_plan import STATEMENT_CALL, plan_test
from trl_loo_gspo.verifiers.code.verdicts import read_verdict

encode, decode, Unplain = wire_codec()
to_json, send = wire_writer()
parse = wire_parser()

VALUES = [
    None,
    True,
    0,
    -(7**9000),  # over Python's 4,300-digit str conversion limit: hexadecimal on the wire
    1.5,
    float("inf"),
    complex(1, -2),
    "a\u2028b\u2029c\x85d\ud800",  # line separators and a lone surrogate
    b"\x00\xff",
    [1, (2, 3), {4}, frozenset({5})],
    {"k": [1, {"n": None}]},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_plain_values_round_trip_exactly(value):
    back = decode(parse(to_json(encode(value)).encode("utf-8", "surrogatepass")))
    assert back == value and type(back) is type(value)


STDLIB_VALUES = [
    collections.Counter("aab"),
    collections.OrderedDict([("b", 1), ("a", 2)]),
    collections.defaultdict(list, {"k": [1]}),
    range(-3, 10**40, 7),
    fractions.Fraction(-3, 4),
    decimal.Decimal("1.10"),
]


@pytest.mark.parametrize("value", STDLIB_VALUES, ids=[type(v).__name__ for v in STDLIB_VALUES])
def test_standard_library_values_cross_as_their_own_type(value):
    back = decode(parse(to_json(encode(value)).encode()))
    assert back == value and type(back) is type(value) and repr(back) == repr(value)


def test_a_defaultdict_keeps_a_builtin_factory_and_drops_any_other():
    assert decode(encode(collections.defaultdict(int)))["missing"] == 0
    assert decode(encode(collections.defaultdict(lambda: 0, {"a": 1}))).default_factory is None


def test_views_keep_order_and_truth_and_iterators_their_items():
    keys = decode(encode({"b": 1, "a": 2}.keys()))
    assert list(keys) == ["b", "a"] and keys == {"a", "b"} and type(keys) is type({}.keys())
    assert not decode(encode({}.values())) and not decode(encode({}.items()))
    assert list(decode(encode({"x": 1}.items()))) == [("x", 1)]
    items = decode(encode(x * 2 for x in range(3)))
    assert list(items) == [0, 2, 4] and not isinstance(items, list)
    assert list(decode(encode(itertools.permutations([1, 2])))) == [(1, 2), (2, 1)]


def test_builtin_subclasses_cross_as_the_builtin_value_they_hold():
    point = collections.namedtuple("Point", "x y")(1, 2)
    assert decode(encode(point)) == (1, 2) and decode(encode(point)).x == 1  # a namedtuple keeps its fields (#45)
    liar = type("Liar", (int,), {"__eq__": lambda self, other: True, "__hash__": int.__hash__})(3)
    assert decode(encode(liar)) == 3 and decode(encode(liar)) != 4 and type(decode(encode(liar))) is int
    shouty = type("Shouty", (str,), {"__str__": lambda self: "NO", "__iter__": lambda self: iter("NO")})("yes")
    assert decode(encode(shouty)) == "yes" and type(decode(encode(shouty))) is str
    assert decode(encode(type("L", (list,), {})([1]))) == [1]


def test_what_one_side_decodes_the_other_can_encode():
    with pytest.raises(Unplain):
        decode(["it", [["i", "1"]] * (WIRE_MAX_ITEMS + 1)])  # the decoder refuses what no encoder would send
    with pytest.raises(Unplain):
        decode(["R", ["h", 0]])  # a handle node from the program's side is not plain data
    handle = object()
    node = encode([1, handle], lambda v: ["h", 7] if v is handle else None)
    assert node == ["l", [["i", "1"], ["R", ["h", 7]]]]
    assert decode(node, lambda target: ("resolved", target)) == [1, ("resolved", ["h", 7])]


@pytest.mark.parametrize("value", [object(), len, [object()], {"a": {1: object()}}], ids=range(4))
def test_anything_else_is_not_plain_data(value):
    with pytest.raises(Unplain):
        encode(value)


def test_decoding_is_strict_and_capped():
    for node in (["i", "x"], ["i", "f" * 250_001], ["S", [["l", []]]], ["z", "1"], [1], {"a": 1}, ["f", "1" * 65]):
        with pytest.raises(Unplain):
            decode(node)
    deep = None
    for _ in range(WIRE_MAX_DEPTH + 2):
        deep = ["l", [deep]]
    with pytest.raises(Unplain):
        decode(deep)
    for data in (b"[1,", b"[1] x", b"NaN", b"\xff"):
        with pytest.raises(ValueError):
            parse(data)


def test_frames_are_length_delimited_and_capped():
    r, w = os.pipe()
    try:
        send(w, ["s", "line\nbreak\u2028"])
        os.write(w, b"999999\n")
        reader = WireReader(r, cap=1000)
        assert parse(reader.read()) == ["s", "line\nbreak\u2028"]
        with pytest.raises(ValueError, match="too large"):
            reader.read()
    finally:
        os.close(r)
        os.close(w)


def test_a_tests_names_are_read_from_the_test_alone():
    plan = plan_test("import random\nassert math.isclose(f(1), 2.0)\nassert sorted(g([2, 1])) == [1, 2]\nx = h")
    assert plan.remote == ("f", "g", "h") and plan.modules == ("math",) and plan.weak is None
    humaneval = plan_test("def check(candidate):\n    assert candidate(1) == poly([1], 1)\n\ncheck(find_zero)\n")
    assert humaneval.remote == ("find_zero", "poly")  # a helper the dataset did not ship is the program's
    assert STATEMENT_CALL in plan_test("x = [2, 1]\nf(x)\nassert x == [1, 2]").source
    assert STATEMENT_CALL not in plan_test("x = [2, 1]\nprint(x)\nassert f(x) == x").source


@pytest.mark.parametrize(
    "test",
    ["assert f(lambda v: v) == 1", "def g(v):\n    return v\nassert f(g) == 1", "assert f(open('x')) == 1"],
)
def test_handing_the_program_a_function_or_a_file_is_weak(test):
    assert plan_test(test).weak is not None


def test_verdicts_are_read_defensively():
    assert read_verdict("0", "9", b'["pass", 3]').passed
    assert read_verdict("0", "9", b'["fail", "AssertionError", 1]').reason == "AssertionError"
    assert read_verdict("0", "9", b'["pass"').reason == "malformed report"  # a judge killed mid-write
    assert read_verdict("24", "9", b"").reason == "cpu"  # wait status 24: the judge killed by SIGXCPU
    ended = read_verdict("0", "24", b'["fail", "the program\'s process ended", 0]')
    assert ended.reason == "cpu"  # the program's process hit its CPU limit
    assert read_verdict("0", "9", b'["weak", "why", 0]').weak
