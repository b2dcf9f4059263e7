"""Issue #45 (wire and judge): right programs that scored 0 because a value or an effect could not cross — each
scores 1 now, its wrong twin still 0 — and the new wire types are data only, strict and capped."""

from __future__ import annotations

import collections
import datetime

import pytest

from trl_loo_gspo.sandbox.wire import WIRE_MAX_DEPTH, wire_codec, wire_parser, wire_writer
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits
from .test_judge_interpretation import judge, needs_bwrap

encode, decode, Unplain = wire_codec()
to_json = wire_writer()[0]
parse = wire_parser()


def cross(value, shared=False):
    """``value`` encoded, framed, parsed and decoded (``shared``: as a call's arguments are, aliases kept)."""
    node = parse(to_json(encode(value, shared=({}, []) if shared else None)).encode("utf-8", "surrogatepass"))
    return decode(node, shared=[] if shared else None)


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(), max_workers=2)


# -- the wire: values that did not cross, or crossed wrong ------------------------------------------------------


def test_an_ordered_dict_keeps_its_own_order_after_move_to_end():
    od = collections.OrderedDict([("a", 1), ("b", 2), ("c", 3)])
    od.move_to_end("a")
    od.move_to_end("c", last=False)
    back = cross(od)
    assert list(back.items()) == [("c", 3), ("b", 2), ("a", 1)] and type(back) is collections.OrderedDict


def test_ordered_dict_views_cross_in_their_order():
    od = collections.OrderedDict([("a", 1), ("b", 2)])
    od.move_to_end("a")
    keys, values, items = cross(od.keys()), cross(od.values()), cross(od.items())
    assert type(keys) is type(od.keys()) and list(keys) == ["b", "a"] and keys == {"a", "b"}
    assert type(values) is type(od.values()) and list(values) == [2, 1]
    assert type(items) is type(od.items()) and list(items) == [("b", 2), ("a", 1)]
    assert not cross(collections.OrderedDict().keys())


@pytest.mark.parametrize(
    "value",
    [
        collections.deque([1, [2]]),
        collections.deque([1, 2], maxlen=3),
        collections.deque(maxlen=0),
        bytearray(b"\x00ab\xff"),
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 2, 29, 23, 59, 58, 999_999),
        datetime.datetime(2024, 3, 31, 1, 30, fold=1, tzinfo=datetime.timezone.utc),
        datetime.datetime(1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=-5, minutes=-30), "X")),
        datetime.time(23, 5, 1, 7, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        datetime.time(),
        datetime.timedelta(days=-3, seconds=5, microseconds=1),
        datetime.timezone.utc,
    ],
    ids=repr,
)
def test_deques_bytearrays_and_datetime_values_cross_as_their_own_type(value):
    back = cross(value)
    assert back == value and type(back) is type(value) and repr(back) == repr(value)
    if isinstance(value, collections.deque):
        assert back.maxlen == value.maxlen
    if isinstance(value, (datetime.datetime, datetime.time)):
        assert back.fold == value.fold and back.tzname() == value.tzname()


def test_a_namedtuple_keeps_its_fields():
    Point = collections.namedtuple("Point", "x y")  # noqa: PYI024
    back = cross([Point(1, [2]), Point(3, 4)])
    assert back[0].x == 1 and back[0].y == [2] and back[0] == (1, [2]) and repr(back[1]) == "Point(x=3, y=4)"
    assert type(back[0]) is type(back[1]) and back[0]._asdict() == {"x": 1, "y": [2]}
    assert issubclass(type(back[0]), tuple) and type(back[0]) is not Point


def test_shared_containers_cross_shared_when_asked():
    row = [0, 0]
    grid = [row, row, [row]]
    back = cross(grid, shared=True)
    assert back == grid and back[0] is back[1] is back[2][0]
    assert cross(grid)[0] is not cross(grid)[1]  # without ``shared``: a tree, as before
    loop = []
    loop.append(loop)
    back = cross(loop, shared=True)
    assert back[0] is back


# -- the wire: the new types are data only, strict and capped ---------------------------------------------------

BAD_NODES = [
    ["@", 0],  # a shared reference outside a call's arguments (answers are trees)
    ["dq", "-1", []],
    ["dq", "1", [["i", "1"], ["i", "2"]]],  # more items than its maxlen: no encoder sends it
    ["dq", "f" * 40, []],
    ["ba", "zz"],
    ["da", "7e8", "d", "1"],  # month 13
    ["da", "7e8", "2", "1e"],
    ["td", "1" * 20, "0", "0"],
    ["dt", "7e8", "1", "1", "0", "0", "0", "0", 2, None],
    ["tz", "0", "0", "0", 5],
    ["tz", "1", "0", "0", None],  # an offset of a day
    ["nt", "P", ["x=__import__('os')"], [None]],
    ["nt", "P", ["_x"], [None]],
    ["nt", "P", ["x", "x"], [None, None]],
    ["nt", "P", ["class"], [None]],
    ["nt", "P\u00e9", ["x"], [None]],  # non-ASCII names (NFKC normalisation) are refused
    ["nt", "P", ["\uff58"], [None]],
    ["nt", "P", ["x"], [None, None]],
    ["nt", "P", [f"a{i}" for i in range(300)], [None] * 300],
    ["odk", [["l", []]]],
    ["odi", [["i", "1"]]],
]


@pytest.mark.parametrize("node", BAD_NODES, ids=range(len(BAD_NODES)))
def test_the_new_nodes_are_decoded_strictly(node):
    with pytest.raises(Unplain):
        decode(node)


def test_shared_references_are_bounded_by_what_was_already_built():
    with pytest.raises(Unplain):
        decode(["l", [["@", 1]]], shared=[])
    with pytest.raises(Unplain):
        decode(["l", [["@", -1]]], shared=[])
    with pytest.raises(Unplain):
        decode(["l", [["@", True]]], shared=[])
    out = decode(["l", [["@", 0]]], shared=[])
    assert out[0] is out
    deep = ["@", 0]
    for _ in range(WIRE_MAX_DEPTH + 2):
        deep = ["l", [deep]]
    with pytest.raises(Unplain):
        decode(deep, shared=[])


def test_namedtuple_classes_are_capped_and_reused():
    _, fresh_decode, fresh_unplain = wire_codec()
    first = fresh_decode(["nt", "P", ["x"], [None]])
    assert type(fresh_decode(["nt", "P", ["x"], [None]])) is type(first)
    with pytest.raises(fresh_unplain):
        for i in range(10_000):
            fresh_decode(["nt", f"P{i}", ["x"], [None]])
    assert i < 10_000


def test_a_tuple_subclass_with_invalid_fields_still_crosses_as_a_tuple():
    liar = type("Liar", (tuple,), {"_fields": ("x=1", "y")})((1, 2))
    assert cross(liar) == (1, 2) and type(cross(liar)) is tuple
    wrong_length = type("Short", (tuple,), {"_fields": ("x",)})((1, 2))
    assert type(cross(wrong_length)) is tuple


# -- through the real sandboxed verifier: right programs that scored 0 now score 1 -------------------------------

RIGHT = {
    "OrderedDict after move_to_end": (
        "from collections import OrderedDict\ndef touch(keys, k):\n    od = OrderedDict.fromkeys(keys, 0)\n"
        "    od.move_to_end(k)\n    return od\n",
        ["assert list(touch('abc', 'a')) == ['b', 'c', 'a']"],
    ),
    "OrderedDict views": (
        "from collections import OrderedDict\ndef order(keys):\n    od = OrderedDict.fromkeys(keys, 1)\n"
        "    od.move_to_end(keys[0])\n    return od.keys(), od.values(), od.items()\n",
        ["k, v, i = order('ab')\nassert list(k) == ['b', 'a'] and list(v) == [1, 1] and list(i)[0] == ('b', 1)"],
    ),
    "deque": (
        "from collections import deque\ndef last(xs, n):\n    return deque(xs, maxlen=n)\n",
        ["from collections import deque\nd = last([1, 2, 3], 2)\nassert d == deque([2, 3]) and d.maxlen == 2"],
    ),
    "datetime.date": (
        "import datetime\ndef parse(s):\n    return datetime.date.fromisoformat(s)\n"
        "def next_day(d):\n    return d + datetime.timedelta(days=1)\n",
        ["import datetime\nassert parse('2024-02-29').year == 2024",
         "import datetime\nassert next_day(datetime.date(2024, 2, 28)) == datetime.date(2024, 2, 29)"],
    ),
    "bytearray": (
        "def flip(b):\n    return bytearray(reversed(b))\ndef upper(buf):\n    buf[:] = buf.upper()\n",
        ["assert flip(b'ab') == bytearray(b'ba') and type(flip(b'')) is bytearray",
         "buf = bytearray(b'abc')\nupper(buf)\nassert buf == b'ABC'"],
    ),
    "namedtuple attributes": (
        "from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\ndef origin():\n"
        "    return Point(0, 0)\ndef shift(p, d):\n    return Point(p.x + d, p.y)\n",
        ["p = origin()\nassert p.x == 0 and p.y == 0 and p == (0, 0)",
         "from collections import namedtuple\nP = namedtuple('P', 'x y')\nassert shift(P(1, 2), 3).x == 4"],
    ),
    "keyword argument written back": (
        "def add_item(item, items):\n    items.append(item)\n",
        ["lst = []\nadd_item(1, items=lst)\nassert lst == [1]"],
    ),
    "nested list changed in place keeps the test's alias": (
        "def mark(grid, r, c):\n    grid[r][c] = 1\n",
        ["grid = [[0] * 3 for _ in range(3)]\nrow = grid[1]\nmark(grid, 1, 2)\nassert row == [0, 0, 1]",
         "grid = [[0] * 3] * 2\nrow = grid[1]\nmark(grid, 0, 0)\nassert row == [1, 0, 0] and grid[0] is grid[1]",
         "d = {'a': [0]}\nv = d['a']\nmark(d, 'a', 0)\nassert v == [1] and d == {'a': [1]}"],
    ),
    "every mutable container type is written back in place": (
        "def bump(d, q, c, o, s):\n    d['k'].append(1)\n    q.append(2)\n    c['x'] += 1\n    o.move_to_end('a')\n"
        "    s.add(3)\n",
        ["from collections import defaultdict, deque, Counter, OrderedDict\n"
         "d, q, c, o, s = defaultdict(list), deque([1], maxlen=2), Counter(), OrderedDict(a=1, b=2), {1}\n"
         "bump(d, q, c, o, s)\nassert d == {'k': [1]} and d['z'] == [] and q == deque([1, 2]) and q.maxlen == 2\n"
         "assert c['x'] == 1 and list(o) == ['b', 'a'] and s == {1, 3}"],
    ),
    "a replaced row leaves the old one as Python would": (
        "def reset(grid):\n    grid[0][0] = 5\n    grid[0] = [9]\n",
        ["grid = [[0], [0]]\nrow = grid[0]\nreset(grid)\nassert row == [5] and grid == [[9], [0]]"],
    ),
    "iterator handed back after read-ahead": (
        "def nums():\n    return (x for x in range(1, 61))\n"
        "def take(it, n):\n    return [next(it) for _ in range(n)]\ndef skip(it):\n    next(it)\n    return it\n",
        ["it = nums()\nassert [next(it) for _ in range(20)] == list(range(1, 21))\n"
         "assert take(it, 3) == [21, 22, 23]\nassert next(it) == 24\nassert list(it) == list(range(25, 61))",
         "it = nums()\nassert [next(it) for _ in range(20)] == list(range(1, 21))\n"
         "assert skip(it) is it\nassert next(it) == 22\nassert take(it, 1) == [23]\nassert next(it) == 24"],
    ),
    "an exception behind read-ahead items follows them to the program": (
        "def boom():\n    yield from range(1, 22)\n    raise ValueError('x')\n"
        "def drain(it):\n    out = []\n    try:\n        for x in it:\n            out.append(x)\n"
        "    except ValueError:\n        out.append('err')\n    return out\n",
        # the judge's 20th read fetches 20, 21 and meets the error: 21 is buffered here, the error pending there
        ["it = boom()\nassert [next(it) for _ in range(20)] == list(range(1, 21))\nassert drain(it) == [21, 'err']"],
    ),
}  # fmt: skip


@needs_bwrap
@pytest.mark.parametrize("shape", sorted(RIGHT))
def test_right_programs_of_issue_45_pass(verifier, shape):
    code, tests = RIGHT[shape]
    result = judge(verifier, code, tests)
    assert result.score == 1.0, result.details


WRONG = {
    "OrderedDict after move_to_end": (
        "from collections import OrderedDict\ndef touch(keys, k):\n    return OrderedDict.fromkeys(keys, 0)\n",
        ["assert list(touch('abc', 'a')) == ['b', 'c', 'a']"],
    ),
    "deque": (
        "from collections import deque\ndef last(xs, n):\n    return deque(xs)\n",
        ["from collections import deque\nd = last([1, 2, 3], 2)\nassert d == deque([2, 3]) and d.maxlen == 2"],
    ),
    "datetime.date": (
        "import datetime\ndef next_day(d):\n    return d\n",
        ["import datetime\nassert next_day(datetime.date(2024, 2, 28)) == datetime.date(2024, 2, 29)"],
    ),
    "namedtuple attributes": (
        "from collections import namedtuple\nPoint = namedtuple('Point', 'y x')\n"
        "def origin():\n    return Point(0, 1)\n",
        ["p = origin()\nassert p.x == 0 and p.y == 1"],
    ),
    "keyword argument written back": (
        "def add_item(item, items):\n    items.append(item + 1)\n",
        ["lst = []\nadd_item(1, items=lst)\nassert lst == [1]"],
    ),
    "nested list": ("def mark(grid, r, c):\n    grid[r] = [1, 1, 1]\n",
                    ["grid = [[0] * 3 for _ in range(3)]\nrow = grid[1]\nmark(grid, 1, 2)\nassert row == [0, 0, 1]"]),
    "iterator": (
        "def nums():\n    return (x for x in range(1, 61))\ndef take(it, n):\n    return list(range(21, 21 + n))\n",
        ["it = nums()\nassert [next(it) for _ in range(20)] == list(range(1, 21))\n"
         "assert take(it, 3) == [21, 22, 23]\nassert next(it) == 24"],
    ),
    "a call that returned a value is still not written back": (
        "def sort(xs):\n    xs.clear()\n    return []\n",
        ["lst = [3, 1, 2]\nres = sort(lst)\nassert res == sorted(lst)",
         "lst = [[3], [1]]\nres = sort(lst[0])\nassert res == sorted(lst[0])"],
    ),
    "a constant shared with an argument is not written back after a call that returned a value": (
        "def f(xs):\n    xs[0][:] = [1]\n    return [1]\n",
        ["expected = [2]\ndata = [expected]\nres = f(data)\nassert res == expected"],
    ),
}  # fmt: skip


@needs_bwrap
@pytest.mark.parametrize("shape", sorted(WRONG))
def test_wrong_programs_of_those_shapes_still_fail(verifier, shape):
    code, tests = WRONG[shape]
    assert judge(verifier, code, tests).score == 0.0


# -- forged answers: the program writes its own frame on its answer pipe -----------------------------------------

FORGE = """
import os, stat, fcntl, time
def _answer_pipe():
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                return fd
        except OSError:
            pass
def f(xs):
    payload = PAYLOAD
    os.write(_answer_pipe(), b"%d\\n" % len(payload) + payload)
    time.sleep(30)
"""


def forged(payload: bytes) -> str:
    return FORGE.replace("PAYLOAD", repr(payload))


@needs_bwrap
def test_a_forged_reference_or_write_back_gains_nothing(verifier):
    test = ["xs = [[0]]\nf(xs)\nassert xs == [[1]] and xs[0] is not xs"]
    # the honest form of what a forged state can say (the same as the program setting xs[0][0] = 1): written back
    assert judge(verifier, forged(b'["ok",null,[["l",[["@",1]]],["l",[["i","1"]]]]]'), test).score == 1.0
    # a reference past the call's containers, or a state that is a reference: nothing is written back
    assert judge(verifier, forged(b'["ok",null,[["l",[["@",7]]],["l",[["i","1"]]]]]'), test).score == 0.0
    assert judge(verifier, forged(b'["ok",null,[["@",0],["l",[["i","1"]]]]]'), test).score == 0.0
    # answers are trees: a reference in a returned value is not plain data
    result = judge(verifier, forged(b'["ok",["l",[["@",0]]],null]'), ["assert f([1]) == [[1]]"])
    assert result.score == 0.0 and "unserialisable" in result.details["checks"][0]["reason"], result.details
