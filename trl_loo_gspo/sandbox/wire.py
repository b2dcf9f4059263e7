"""Plain data and frames between the judge and the candidate process (part of the sandbox's trusted runner text).

:mod:`.bubblewrap` joins ``wire.py``, ``candidate.py``, ``judge.py`` and ``runner.py`` into one program and runs it
with ``python -I -S`` inside the sandbox; the host imports this module only for tests. Standard library only.

Frames: ``b"<decimal length>\\n"`` then that many bytes of UTF-8 JSON text (lone surrogates passed through). Lengths,
not line ends, delimit a frame, so no character of a value (U+2028, U+0085, ...) can break one.

Values (one JSON value per node; written by :func:`wire_codec`'s encoder, rebuilt by its decoder as objects of the
exact types below, nothing else)::

    null | true | false                 None, True, False
    ["i", "<hex>"]                      int (hexadecimal: exempt from Python's 4,300-digit conversion limit)
    ["f", "<repr>"]                     float (incl. inf / nan)
    ["c", "<repr real>", "<repr imag>"] complex
    ["s", "<text>"]                     str
    ["b", "<hex>"]                      bytes
    ["l" | "t" | "S" | "F", [...]]      list, tuple, set, frozenset
    ["d", [[key, value], ...]]          dict
    ["Ct" | "od", [[key, value], ...]]  collections.Counter, collections.OrderedDict
    ["dd", factory | null, [...]]       collections.defaultdict; the factory crosses when it is a builtin type (int,
                                        list, set, ...), else it arrives as None
    ["dk" | "dv" | "di", [...]]         dict_keys, dict_values, dict_items views (order kept; an empty one is falsy)
    ["rg", start, stop, step]           range (hexadecimal ints)
    ["fr", num, den] | ["dc", "<str>"]  fractions.Fraction, decimal.Decimal
    ["it", [...]]                       an iterator nested in a value (generator, map, zip, itertools, ...), consumed
                                        by the sender; rebuilt as an iterator over the items (equal only to itself)
    ["R", target]                       judge → candidate only: an object of the program the judge holds (a handle)

A subclass of a builtin value type (a namedtuple, an ``int`` or ``dict`` subclass) crosses as the builtin value it
holds, read with the builtin's own methods: its class and attributes do not cross.
Anything else raises the codec's ``Unplain``. The decoder caps nesting depth, int and float sizes; the whole frame is
capped by the reader. JSON is parsed by the C scanner of the standard library's ``_json`` (``import json`` costs
~20 ms of a ~20 ms run: it imports ``re``), falling back to :mod:`json` where ``_json`` is missing.
"""

import os
import sys

#: Nesting depth beyond which a value is refused.
WIRE_MAX_DEPTH = 100
#: Largest int, in hexadecimal digits (a million bits).
WIRE_MAX_INT_HEX = 250_000
#: Most items of an iterator sent whole (both ways: an encoder refuses what the other side's decoder would).
WIRE_MAX_ITEMS = 1_000_000
_WIRE_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", **{i: f"\\u{i:04x}" for i in range(32)}}


def wire_writer():
    """``(to_json, send)``: JSON text of None/bool/int/str/list (what frames hold, written by hand: no ``json``
    import) and ``send(fd, value)`` writing one frame. Built before untrusted code runs: they hold their own
    references to the builtins they use, so a program that patches ``builtins`` does not change them."""
    _type, _repr_i, _translate, _join, _len, _write, _bool, _int, _str = (
        type,
        int.__repr__,
        str.translate,
        ",".join,
        len,
        os.write,
        bool,
        int,
        str,
    )
    escapes = dict(_WIRE_ESCAPES)

    def to_json(x):
        t = _type(x)
        if x is None:
            return "null"
        if t is _bool:
            return "true" if x else "false"
        if t is _int:
            return _repr_i(x)
        if t is _str:
            return '"' + _translate(x, escapes) + '"'
        return "[" + _join([to_json(item) for item in x]) + "]"

    def send(fd, value):
        payload = to_json(value).encode("utf-8", "surrogatepass")
        data = b"%d\n" % _len(payload) + payload
        while data:
            data = data[_write(fd, data) :]

    return to_json, send


wire_json, wire_send = wire_writer()


def wire_parser():
    """A function parsing one frame's bytes into JSON values; raises ``ValueError`` when malformed."""
    try:
        import _json

        class _Context:
            strict = True
            object_hook = None
            object_pairs_hook = None
            parse_float = float
            parse_int = int
            parse_constant = None  # NaN / Infinity are not ours: calling None fails the frame

        scan = _json.make_scanner(_Context())
    except (ImportError, AttributeError):  # pragma: no cover - CPython ships _json
        import json

        scan = None
        loads = json.loads
    _len, _decode = len, bytes.decode

    def parse(data):
        try:
            text = _decode(data, "utf-8", "surrogatepass")
            if scan is None:  # pragma: no cover
                return loads(text)
            value, end = scan(text, 0)
        except (StopIteration, ValueError, TypeError, RecursionError, UnicodeDecodeError, MemoryError) as err:
            raise ValueError(f"malformed frame: {type(err).__name__}") from None
        if end != _len(text):
            raise ValueError("malformed frame: trailing data")
        return value

    return parse


class WireReader:
    """Reads frames from one pipe; ``read()`` returns a frame's bytes, ``None`` at end of file, and raises
    ``ValueError`` for a malformed header or a frame over ``cap`` bytes (builtins bound at construction)."""

    def __init__(self, fd, cap):
        self.fd, self.cap, self.buf = fd, cap, bytearray()
        self._os_read, self._len, self._bytes, self._int, self._max = os.read, len, bytes, int, max

    def _fill(self, want):
        chunk = self._os_read(self.fd, self._max(65536, want))
        if not chunk:
            return False
        self.buf += chunk
        return True

    def read(self):
        while True:
            newline = self.buf.find(b"\n", 0, 16)
            if newline >= 0:
                break
            if self._len(self.buf) >= 16:
                raise ValueError("malformed frame header")
            if not self._fill(0):
                return None
        head = self._bytes(self.buf[:newline])
        if not head.isdigit():
            raise ValueError("malformed frame header")
        size = self._int(head)
        if size > self.cap:
            raise ValueError("frame too large")
        del self.buf[: newline + 1]
        while self._len(self.buf) < size:
            if not self._fill(size - self._len(self.buf)):
                return None
        frame = self._bytes(self.buf[:size])
        del self.buf[:size]
        return frame


def wire_codec():
    """``(encode, decode, Unplain)`` over the value format (module docstring), with references to the builtins taken
    now: built by the runner before any untrusted code runs, so a program that patches builtins later changes nothing
    in them (in the candidate it can still corrupt its own process: the judge trusts nothing it sends).

    ``encode(value, ref=None)``: ``ref(x)`` may return a target for an object of the program that the judge holds (a
    handle): it crosses as ``["R", target]``. ``decode(node, resolve=None)``: ``resolve(target)`` rebuilds such a node
    (the candidate's own object); without ``resolve`` (the judge reading an answer) an ``"R"`` node is not plain data.
    Whatever one side's decoder accepts the other's encoder re-encodes: the caps (depth, int size, iterator length)
    are the same both ways."""
    _type, _repr_i, _repr_f, _hex, _fromhex, _items, _len = (
        type,
        int.__format__,
        float.__repr__,
        bytes.hex,
        bytes.fromhex,
        dict.items,
        len,
    )
    _int, _float, _complex, _iter, _range, _zip = int, float, complex, iter, range, zip
    _list, _tuple, _set, _frozenset, _dict, _str, _bytes = list, tuple, set, frozenset, dict, str, bytes
    _isinstance, _issubclass, _modules, _getattr, _import = isinstance, issubclass, sys.modules, getattr, __import__
    _str_copy, _bytes_copy = str.__getitem__, bytes.__getitem__
    _whole = slice(None)
    iters = {list: list.__iter__, tuple: tuple.__iter__, set: set.__iter__, frozenset: frozenset.__iter__}
    seqs = {list: "l", tuple: "t", set: "S", frozenset: "F"}
    builders = {"l": _list, "t": _tuple, "S": _set, "F": _frozenset}
    iterators = {
        _type(x for x in ()),
        map,
        filter,
        zip,
        enumerate,
        reversed,
        _type(iter([])),
        _type(iter(())),
        _type(iter(range(0))),
        _type(iter("")),
        _type(iter({}.values())),
        _type(iter({}.items())),
        _type(iter({})),
        _type(iter(set())),
    }
    views = {_type({}.keys()): "dk", _type({}.values()): "dv", _type({}.items()): "di"}
    #: defaultdict factories that cross by name (any other factory arrives as ``None``: docs/rewards.md)
    factories = {c.__name__: c for c in (int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset)}

    class Unplain(Exception):
        pass

    def stdlib_type(module, name):
        """A standard-library class as the *trusted* side sees it: the module already imported (encoding: a value of
        that class can only exist if it is), or imported now (decoding)."""
        found = _getattr(_modules.get(module), name, None)
        return found if _isinstance(found, type) else None

    def pairs(v, ref, depth):
        """A mapping's items as ``[[key, value], ...]`` nodes (``dict.items``: whatever a subclass overrides)."""
        return [[encode(k, ref, depth + 1), encode(x, ref, depth + 1)] for k, x in _items(v)]

    def encode(v, ref=None, depth=0):
        if depth > WIRE_MAX_DEPTH:
            raise Unplain("nested too deeply")
        if ref is not None:
            target = ref(v)
            if target is not None:
                return ["R", target]
        t = _type(v)
        if v is None or t is bool:
            return v
        if t is int:
            return ["i", _repr_i(v, "x")]
        if t is float:
            return ["f", _repr_f(v)]
        if t is str:
            return ["s", v]
        if t in seqs:
            return [seqs[t], [encode(x, ref, depth + 1) for x in iters[t](v)]]
        if t is dict:
            return ["d", pairs(v, ref, depth)]
        if t in views:
            return [views[t], [encode(x, ref, depth + 1) for x in v]]
        if t in iterators or _getattr(t, "__module__", None) == "itertools":
            out = []
            for x in v:
                out.append(encode(x, ref, depth + 1))
                if _len(out) > WIRE_MAX_ITEMS:
                    raise Unplain("iterator too long")
            return ["it", out]
        if t is complex:
            return ["c", _repr_f(v.real), _repr_f(v.imag)]
        if t is bytes:
            return ["b", _hex(v)]
        if t is _range:
            return ["rg", _repr_i(v.start, "x"), _repr_i(v.stop, "x"), _repr_i(v.step, "x")]
        if t is stdlib_type("collections", "Counter"):
            return ["Ct", pairs(v, ref, depth)]
        if t is stdlib_type("collections", "OrderedDict"):
            return ["od", pairs(v, ref, depth)]
        if t is stdlib_type("collections", "defaultdict"):
            factory = v.default_factory
            name = factory.__name__ if _type(factory) is type and factories.get(factory.__name__) is factory else None
            return ["dd", name, pairs(v, ref, depth)]
        if t is stdlib_type("fractions", "Fraction"):
            return ["fr", _repr_i(v.numerator, "x"), _repr_i(v.denominator, "x")]
        if t is stdlib_type("decimal", "Decimal"):
            return ["dc", _str(v)]
        # a subclass of a builtin value type (a namedtuple, an int subclass, ...): its builtin value, read with the
        # builtin's own methods (whatever the subclass overrides); the subclass itself does not cross
        if _isinstance(v, int):
            return ["i", _repr_i(v, "x")]
        if _isinstance(v, float):
            return ["f", _repr_f(v)]
        if _isinstance(v, str):
            return ["s", _str_copy(v, _whole)]
        if _isinstance(v, bytes):
            return ["b", _hex(_bytes_copy(v, _whole))]
        for base in (list, tuple, set, frozenset):
            if _isinstance(v, base):
                return [seqs[base], [encode(x, ref, depth + 1) for x in iters[base](v)]]
        if _isinstance(v, dict):
            return ["d", pairs(v, ref, depth)]
        raise Unplain(t.__name__)

    def pairs_of(items, resolve, depth):
        out = []
        for pair in items:
            if _type(pair) is not list or _len(pair) != 2:
                raise Unplain("bad dict item")
            out.append((decode(pair[0], resolve, depth + 1), decode(pair[1], resolve, depth + 1)))
        return out

    def big_int(text):
        if _type(text) is not str or _len(text) > WIRE_MAX_INT_HEX:
            raise Unplain("bad int")
        return _int(text, 16)

    def decode(node, resolve=None, depth=0):
        if depth > WIRE_MAX_DEPTH:
            raise Unplain("nested too deeply")
        if node is None or node is True or node is False:
            return node
        if _type(node) is not list or not node or _type(node[0]) is not str:
            raise Unplain("not a tagged value")
        tag, n = node[0], _len(node)
        if n == 2 and _type(node[1]) is str:
            arg = node[1]
            if tag == "i":
                return big_int(arg)
            if tag == "f" and _len(arg) <= 64:
                return _float(arg)
            if tag == "s":
                return arg
            if tag == "b":
                return _fromhex(arg)
            if tag == "dc" and _len(arg) <= 4096:
                return _import("decimal").Decimal(arg)
        elif n == 2 and _type(node[1]) is list:
            items = node[1]
            if tag in builders:
                return builders[tag]([decode(x, resolve, depth + 1) for x in items])
            if tag == "it" and _len(items) <= WIRE_MAX_ITEMS:
                return _iter([decode(x, resolve, depth + 1) for x in items])
            if tag == "d":
                return _dict(pairs_of(items, resolve, depth))
            if tag == "Ct":
                return _import("collections").Counter(_dict(pairs_of(items, resolve, depth)))
            if tag == "od":
                return _import("collections").OrderedDict(pairs_of(items, resolve, depth))
            if tag == "dk":
                return _dict.fromkeys([decode(x, resolve, depth + 1) for x in items]).keys()
            if tag == "dv":
                return _dict(_zip(_range(_len(items)), [decode(x, resolve, depth + 1) for x in items])).values()
            if tag == "di":
                pairs = [decode(x, resolve, depth + 1) for x in items]
                if any(_type(p) is not tuple or _len(p) != 2 for p in pairs):
                    raise Unplain("bad items view")
                return _dict(pairs).items()
            if tag == "R" and resolve is not None:
                return resolve(items)
        elif n == 3 and tag == "c" and _type(node[1]) is str and _type(node[2]) is str:
            if _len(node[1]) <= 64 and _len(node[2]) <= 64:
                return _complex(_float(node[1]), _float(node[2]))
        elif n == 3 and tag == "dd" and (node[1] is None or node[1] in factories) and _type(node[2]) is list:
            factory = factories[node[1]] if node[1] is not None else None
            return _import("collections").defaultdict(factory, pairs_of(node[2], resolve, depth))
        elif n == 3 and tag == "fr":
            return _import("fractions").Fraction(big_int(node[1]), big_int(node[2]))
        elif n == 4 and tag == "rg":
            return _range(big_int(node[1]), big_int(node[2]), big_int(node[3]))
        raise Unplain(f"bad value tag {tag[:20]!r}")

    def safe_decode(node, resolve=None):
        """:func:`decode`, with every failure (a bad number, an unhashable set item, ...) as ``Unplain``."""
        try:
            return decode(node, resolve)
        except Unplain:
            raise
        except (ValueError, TypeError, RecursionError, OverflowError, ZeroDivisionError, ArithmeticError) as err:
            raise Unplain(f"{type(err).__name__}") from None

    def safe_encode(value, ref=None):
        """:func:`encode` (positional ``depth`` not exposed)."""
        return encode(value, ref)

    return safe_encode, safe_decode, Unplain
