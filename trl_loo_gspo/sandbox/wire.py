"""Plain data and frames between the judge and the candidate process (part of the sandbox's trusted runner text).

:mod:`.bubblewrap` joins ``wire.py``, ``candidate.py``, ``judge.py`` and ``runner.py`` into one program and runs it
with ``python -I -S`` inside the sandbox; the host imports this module only for tests. Standard library only.

Frames: ``b"<decimal length>\\n"`` then that many bytes of UTF-8 JSON text (lone surrogates passed through). Lengths,
not line ends, delimit a frame, so no character of a value (U+2028, U+0085, ...) can break one.

Values (one JSON value per node; written by :func:`wire_codec`'s encoder, rebuilt by its decoder as builtin objects of
the exact types, nothing else)::

    null | true | false                 None, True, False
    ["i", "<hex>"]                      int (hexadecimal: exempt from Python's 4,300-digit conversion limit)
    ["f", "<repr>"]                     float (incl. inf / nan)
    ["c", "<repr real>", "<repr imag>"] complex
    ["s", "<text>"]                     str
    ["b", "<hex>"]                      bytes
    ["l" | "t" | "S" | "F", [...]]      list, tuple, set, frozenset
    ["d", [[key, value], ...]]          dict (also Counter / OrderedDict / defaultdict, read as the dict they hold;
                                        a dict_keys view is a set)
    ["it", [...]]                       an iterator (generator, map, zip, ...), consumed by the sender; rebuilt as an
                                        iterator over the items (equal only to itself, as a generator is)

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
        except (StopIteration, ValueError, TypeError, RecursionError, UnicodeDecodeError) as err:
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
    in them (in the candidate it can still corrupt its own process: the judge trusts nothing it sends)."""
    _type, _repr_i, _repr_f, _hex, _fromhex, _items, _len = (
        type,
        int.__format__,
        float.__repr__,
        bytes.hex,
        bytes.fromhex,
        dict.items,
        len,
    )
    _int, _float, _complex, _iter = int, float, complex, iter
    _list, _tuple, _set, _frozenset, _dict = list, tuple, set, frozenset, dict
    _isinstance, _issubclass, _modules = isinstance, issubclass, sys.modules
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
        _type({}.values()),
        _type({}.items()),
        _type(iter({}.values())),
        _type(iter({}.items())),
        _type(iter({})),
        _type(iter(set())),
    }
    keys = _type({}.keys())

    class Unplain(Exception):
        pass

    def mapping_types():
        collections = _modules.get("collections")
        found = [getattr(collections, n, None) for n in ("Counter", "OrderedDict", "defaultdict")]
        return [t for t in found if _isinstance(t, type) and _issubclass(t, _dict)]

    def encode(v, depth=0):
        if depth > WIRE_MAX_DEPTH:
            raise Unplain("nested too deeply")
        t = _type(v)
        if v is None or t is bool:
            return v
        if t is int:
            return ["i", _repr_i(v, "x")]
        if t is float:
            return ["f", _repr_f(v)]
        if t is complex:
            return ["c", _repr_f(v.real), _repr_f(v.imag)]
        if t is str:
            return ["s", v]
        if t is bytes:
            return ["b", _hex(v)]
        if t in seqs:
            return [seqs[t], [encode(x, depth + 1) for x in v]]
        if t is dict or t in mapping_types():
            return ["d", [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in _items(v)]]
        if t is keys:
            return ["S", [encode(x, depth + 1) for x in v]]
        if t in iterators:
            out = []
            for x in v:
                out.append(encode(x, depth + 1))
                if _len(out) > 1_000_000:
                    raise Unplain("iterator too long")
            return ["it", out]
        raise Unplain(t.__name__)

    def decode(node, depth=0):
        if depth > WIRE_MAX_DEPTH:
            raise Unplain("nested too deeply")
        if node is None or node is True or node is False:
            return node
        if _type(node) is not list or not node or _type(node[0]) is not str:
            raise Unplain("not a tagged value")
        tag, n = node[0], _len(node)
        if n == 2 and _type(node[1]) is str:
            arg = node[1]
            if tag == "i" and _len(arg) <= WIRE_MAX_INT_HEX:
                return _int(arg, 16)
            if tag == "f" and _len(arg) <= 64:
                return _float(arg)
            if tag == "s":
                return arg
            if tag == "b":
                return _fromhex(arg)
        elif n == 2 and _type(node[1]) is list:
            if tag in builders:
                return builders[tag]([decode(x, depth + 1) for x in node[1]])
            if tag == "it":
                return _iter([decode(x, depth + 1) for x in node[1]])
            if tag == "d":
                out = {}
                for pair in node[1]:
                    if _type(pair) is not list or _len(pair) != 2:
                        raise Unplain("bad dict item")
                    out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
                return out
        elif n == 3 and tag == "c" and _type(node[1]) is str and _type(node[2]) is str:
            if _len(node[1]) <= 64 and _len(node[2]) <= 64:
                return _complex(_float(node[1]), _float(node[2]))
        raise Unplain(f"bad value tag {tag[:20]!r}")

    def safe_decode(node):
        """:func:`decode`, with every failure (a bad number, an unhashable set item, ...) as ``Unplain``."""
        try:
            return decode(node)
        except Unplain:
            raise
        except (ValueError, TypeError, RecursionError, OverflowError) as err:
            raise Unplain(f"{type(err).__name__}") from None

    return encode, safe_decode, Unplain
