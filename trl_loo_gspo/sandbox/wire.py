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
    ["odk" | "odv" | "odi", [...]]      the same views of an OrderedDict (its own order)
    ["ba", "<hex>"]                     bytearray
    ["dq", maxlen | null, [...]]        collections.deque (hexadecimal maxlen)
    ["rg", start, stop, step]           range (hexadecimal ints)
    ["fr", num, den] | ["dc", "<str>"]  fractions.Fraction, decimal.Decimal
    ["da", y, m, d]                     datetime.date; ["dt", y, m, d, H, M, S, us, fold, tz] datetime.datetime;
                                        ["tm", H, M, S, us, fold, tz] datetime.time; ["td", days, s, us] timedelta
                                        (hexadecimal fields); tz: null or ["tz", days, s, us, name | null], a
                                        datetime.timezone (the only tzinfo that is data; any other does not cross)
    ["nt", "<class>", ["<field>", ...], [...]]  a namedtuple: rebuilt with collections.namedtuple from its names
                                        (ASCII identifiers, checked both ways; one class per name and fields)
    ["it", [...]]                       an iterator nested in a value (generator, map, zip, itertools, ...), consumed
                                        by the sender; rebuilt as an iterator over the items (equal only to itself)
    ["R", target]                       judge → candidate only: an object of the program the judge holds (a handle)
    ["@", k]                            a call's arguments and their write-back only (decoded with ``shared``): the
                                        k-th mutable container (list, dict, set, bytearray, deque, Counter,
                                        OrderedDict, defaultdict) met again — aliases and cycles arrive as in Python

A subclass of a builtin value type (an ``int`` or ``dict`` subclass, a namedtuple whose names cannot be rebuilt)
crosses as the builtin value it holds, read with the builtin's own methods: its class and attributes do not cross.
Anything else raises the codec's ``Unplain``. The decoder caps nesting depth, int and float sizes, namedtuple names
and classes; the whole frame is capped by the reader. JSON is parsed by the C scanner of the standard library's
``_json`` (``import json`` costs ~20 ms of a ~20 ms run: it imports ``re``), falling back to :mod:`json` where
``_json`` is missing.
"""

import os
import sys

#: Nesting depth beyond which a value is refused.
WIRE_MAX_DEPTH = 100
#: Largest int, in hexadecimal digits (a million bits).
WIRE_MAX_INT_HEX = 250_000
#: Most items of an iterator sent whole (both ways: an encoder refuses what the other side's decoder would).
WIRE_MAX_ITEMS = 1_000_000
#: Most fields of a namedtuple, longest class, field or timezone name, most namedtuple classes one process rebuilds.
WIRE_MAX_FIELDS, WIRE_MAX_NAME, WIRE_MAX_NAMEDTUPLES = 256, 100, 256
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


def wire_codec(numpy_scalars=False):
    """``(encode, decode, Unplain)`` over the value format (module docstring), with references to the builtins taken
    now: built by the runner before any untrusted code runs, so a program that patches builtins later changes nothing
    in them (in the candidate it can still corrupt its own process: the judge trusts nothing it sends).

    ``encode(value, ref=None, shared=None)``: ``ref(x)`` may return a target for an object of the program that the
    judge holds (a handle): it crosses as ``["R", target]``. ``decode(node, resolve=None, shared=None)``:
    ``resolve(target)`` rebuilds such a node (the candidate's own object); without ``resolve`` (the judge reading an
    answer) an ``"R"`` node is not plain data. ``shared`` (a call's arguments and their write-back only): the encoder's
    ``({id: k}, [objects])`` and the decoder's ``[objects]`` number the mutable containers in the order they are
    first met, and a container met again crosses as ``["@", k]`` (aliases and cycles survive, as in Python); with
    ``own=True`` the value's own top container is not numbered or looked up (a write-back state: the contents of
    container ``k``). Without ``shared`` a ``"@"`` node is not plain data: answers are trees.
    Whatever one side's decoder accepts the other's encoder re-encodes: the caps (depth, int size, iterator length,
    namedtuple names and classes) are the same both ways.

    ``numpy_scalars`` (the candidate's codec only: :func:`.candidate.run_candidate`): a numpy scalar (``np.int64``,
    ``np.float32``, ``np.bool_``, ...) is encoded as the Python number it holds — only when ``numpy`` is already in
    ``sys.modules``, the value's type says ``__module__ == "numpy"`` and subclasses ``numpy.generic``, and
    ``numpy.generic.item`` (numpy's own, whatever a subclass overrides, as a builtin subclass is read with the
    builtin's methods) returns exactly an int, float, bool or complex; anything else (an ndarray, a ``datetime64``,
    an object that only claims to be numpy's) stays not plain. The judge's codec never converts, and nothing here
    imports numpy."""
    _type, _repr_i, _repr_f, _hex, _fromhex, _items, _len = (
        type,
        int.__format__,
        float.__repr__,
        bytes.hex,
        bytes.fromhex,
        dict.items,
        len,
    )
    _int, _float, _complex, _iter, _range, _zip, _id = int, float, complex, iter, range, zip, id
    _list, _tuple, _set, _frozenset, _dict, _str, _bytes = list, tuple, set, frozenset, dict, str, bytes
    _bytearray, _ba_hex, _ba_fromhex, _tuple_new = bytearray, bytearray.hex, bytearray.fromhex, tuple.__new__
    _isinstance, _issubclass, _modules, _getattr, _import = isinstance, issubclass, sys.modules, getattr, __import__
    _str_copy, _bytes_copy, _isascii, _isidentifier = str.__getitem__, bytes.__getitem__, str.isascii, str.isidentifier
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
    od_views = {}  # OrderedDict's views, once collections is imported
    #: defaultdict factories that cross by name (any other factory arrives as ``None``: docs/rewards.md)
    factories = {c.__name__: c for c in (int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset)}
    named = {}  # (typename, fields) → the namedtuple class rebuilt here (at most WIRE_MAX_NAMEDTUPLES)

    class Unplain(Exception):
        pass

    def stdlib_type(module, name):
        """A standard-library class as the *trusted* side sees it: the module already imported (encoding: a value of
        that class can only exist if it is), or imported now (decoding)."""
        found = _getattr(_modules.get(module), name, None)
        return found if _isinstance(found, type) else None

    def share(v, shared, own):
        """A mutable container of a call's arguments (``shared``): ``["@", k]`` when it was met before, else None,
        numbered now (a write-back state's ``own`` container is numbered already)."""
        if shared is None or own:
            return None
        k = shared[0].get(_id(v))
        if k is not None:
            return ["@", k]
        shared[0][_id(v)] = _len(shared[1])
        shared[1].append(v)  # kept alive: its id stays its own while the call is encoded
        return None

    def pairs(v, ref, depth, shared, items=_items):
        """A mapping's items as ``[[key, value], ...]`` nodes (``dict.items``: whatever a subclass overrides)."""
        return [[encode(k, ref, depth + 1, shared), encode(x, ref, depth + 1, shared)] for k, x in items(v)]

    def names_ok(typename, fields):
        """Whether a namedtuple's names can be rebuilt by ``collections.namedtuple``: ASCII identifiers (no NFKC
        normalisation), no keyword, fields unique and not underscored, all capped."""

        def ok(name):
            return _type(name) is str and _len(name) <= WIRE_MAX_NAME and _isascii(name) and _isidentifier(name)

        if not ok(typename) or _len(fields) > WIRE_MAX_FIELDS or not all(ok(f) and f[0] != "_" for f in fields):
            return False
        iskeyword = _import("keyword").iskeyword
        return _len(_set(fields)) == _len(fields) and not iskeyword(typename) and not any(map(iskeyword, fields))

    def zone(tz):
        """A ``datetime.timezone`` (the only tzinfo that is plain data) as ``["tz", days, s, us, name | null]``."""
        if tz is None:
            return None
        if _type(tz) is not stdlib_type("datetime", "timezone"):
            raise Unplain("tzinfo")
        offset = tz.utcoffset(None)
        name = tz.tzname(None)
        name = None if name == _type(tz)(offset).tzname(None) else name
        return ["tz", *[_repr_i(x, "x") for x in (offset.days, offset.seconds, offset.microseconds)], name]

    def encode(v, ref=None, depth=0, shared=None, own=False):
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
            if t is list or t is set:
                alias = share(v, shared, own)
                if alias is not None:
                    return alias
            return [seqs[t], [encode(x, ref, depth + 1, shared) for x in iters[t](v)]]
        if t is dict:
            alias = share(v, shared, own)
            if alias is not None:
                return alias
            return ["d", pairs(v, ref, depth, shared)]
        if t in views:
            return [views[t], [encode(x, ref, depth + 1, shared) for x in v]]
        if t in iterators or _getattr(t, "__module__", None) == "itertools":
            out = []
            for x in v:
                out.append(encode(x, ref, depth + 1, shared))
                if _len(out) > WIRE_MAX_ITEMS:
                    raise Unplain("iterator too long")
            return ["it", out]
        if t is complex:
            return ["c", _repr_f(v.real), _repr_f(v.imag)]
        if t is bytes:
            return ["b", _hex(v)]
        if t is _bytearray:
            alias = share(v, shared, own)
            if alias is not None:
                return alias
            return ["ba", _ba_hex(v)]
        if t is _range:
            return ["rg", _repr_i(v.start, "x"), _repr_i(v.stop, "x"), _repr_i(v.step, "x")]
        if t is stdlib_type("collections", "Counter"):
            alias = share(v, shared, own)
            if alias is not None:
                return alias
            return ["Ct", pairs(v, ref, depth, shared)]
        if t is stdlib_type("collections", "OrderedDict"):
            alias = share(v, shared, own)
            if alias is not None:
                return alias
            return ["od", pairs(v, ref, depth, shared, t.items)]  # its own order (move_to_end), not the dict's
        if t is stdlib_type("collections", "defaultdict"):
            alias = share(v, shared, own)
            if alias is not None:
                return alias
            factory = v.default_factory
            name = factory.__name__ if _type(factory) is type and factories.get(factory.__name__) is factory else None
            return ["dd", name, pairs(v, ref, depth, shared)]
        if t is stdlib_type("collections", "deque"):
            alias = share(v, shared, own)
            if alias is not None:
                return alias
            size = None if v.maxlen is None else _repr_i(v.maxlen, "x")
            return ["dq", size, [encode(x, ref, depth + 1, shared) for x in v]]
        if not od_views and stdlib_type("collections", "OrderedDict") is not None:
            od = stdlib_type("collections", "OrderedDict")()
            od_views.update({_type(od.keys()): "odk", _type(od.values()): "odv", _type(od.items()): "odi"})
        if t in od_views:
            return [od_views[t], [encode(x, ref, depth + 1, shared) for x in v]]
        if t is stdlib_type("fractions", "Fraction"):
            return ["fr", _repr_i(v.numerator, "x"), _repr_i(v.denominator, "x")]
        if t is stdlib_type("decimal", "Decimal"):
            return ["dc", _str(v)]
        if t is stdlib_type("datetime", "date"):
            return ["da", *[_repr_i(x, "x") for x in (v.year, v.month, v.day)]]
        if t is stdlib_type("datetime", "datetime"):
            fields = (v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.fold)
            return ["dt", *[_repr_i(x, "x") for x in fields], zone(v.tzinfo)]
        if t is stdlib_type("datetime", "time"):
            fields = (v.hour, v.minute, v.second, v.microsecond, v.fold)
            return ["tm", *[_repr_i(x, "x") for x in fields], zone(v.tzinfo)]
        if t is stdlib_type("datetime", "timedelta"):
            return ["td", *[_repr_i(x, "x") for x in (v.days, v.seconds, v.microseconds)]]
        if t is stdlib_type("datetime", "timezone"):
            return zone(v)
        # a namedtuple (collections.namedtuple, typing.NamedTuple): its class name, field names and values; rebuilt
        # on the other side as a namedtuple of those names (its methods and other attributes do not cross)
        if _isinstance(v, tuple):
            fields = _getattr(t, "_fields", None)
            if _type(fields) is tuple and _len(fields) == _len(v) and names_ok(t.__name__, fields):
                values = [encode(x, ref, depth + 1, shared) for x in iters[tuple](v)]
                return ["nt", t.__name__, _list(fields), values]
        # a subclass of a builtin value type (an int subclass, ...): its builtin value, read with the builtin's own
        # methods (whatever the subclass overrides); the subclass itself does not cross
        if _isinstance(v, int):
            return ["i", _repr_i(v, "x")]
        if _isinstance(v, float):
            return ["f", _repr_f(v)]
        if _isinstance(v, str):
            return ["s", _str_copy(v, _whole)]
        if _isinstance(v, bytes):
            return ["b", _hex(_bytes_copy(v, _whole))]
        if _isinstance(v, _bytearray):
            alias = share(v, shared, own)
            if alias is not None:
                return alias
            return ["ba", _ba_hex(v)]
        for base in (list, tuple, set, frozenset):
            if _isinstance(v, base):
                if base is list or base is set:
                    alias = share(v, shared, own)
                    if alias is not None:
                        return alias
                return [seqs[base], [encode(x, ref, depth + 1, shared) for x in iters[base](v)]]
        if _isinstance(v, dict):
            alias = share(v, shared, own)
            if alias is not None:
                return alias
            return ["d", pairs(v, ref, depth, shared)]
        if numpy_scalars and _type(_getattr(t, "__module__", None)) is _str and t.__module__ == "numpy":
            number = numpy_number(v, t)
            if number is not None:
                return encode(number, None, depth + 1)
        raise Unplain(t.__name__)

    def numpy_number(v, t):
        """The Python number a numpy scalar ``v`` of type ``t`` holds, or None: ``numpy.generic`` is looked up in
        the modules already imported (a value of numpy's can only exist if numpy is), never imported here."""
        generic = _getattr(_modules.get("numpy"), "generic", None)
        if not _isinstance(generic, type) or not _issubclass(t, generic):
            return None
        try:
            number = generic.item(v)  # numpy's own method, whatever the program's subclass overrides
        except Exception:
            return None
        return number if _type(number) in (_int, _float, bool, _complex) else None

    def pairs_of(items, resolve, depth, shared):
        out = []
        for pair in items:
            if _type(pair) is not list or _len(pair) != 2:
                raise Unplain("bad dict item")
            out.append((decode(pair[0], resolve, depth + 1, shared), decode(pair[1], resolve, depth + 1, shared)))
        return out

    def big_int(text):
        if _type(text) is not str or _len(text) > WIRE_MAX_INT_HEX:
            raise Unplain("bad int")
        return _int(text, 16)

    def small_ints(nodes):
        """Hexadecimal fields of a date, a time, a timedelta (each at most 16 digits; the constructor checks)."""
        if any(_type(x) is not str or _len(x) > 16 for x in nodes):
            raise Unplain("bad field")
        return [_int(x, 16) for x in nodes]

    def tzinfo_of(node):
        if node is None:
            return None
        if _type(node) is not list or _len(node) != 5 or node[0] != "tz":
            raise Unplain("bad tzinfo")
        if node[4] is not None and (_type(node[4]) is not str or _len(node[4]) > WIRE_MAX_NAME):
            raise Unplain("bad tzinfo")
        datetime = _import("datetime")
        offset = datetime.timedelta(*small_ints(node[1:4]))
        return datetime.timezone(offset) if node[4] is None else datetime.timezone(offset, node[4])

    def keep(obj, shared, own):
        """A mutable container decoded with ``shared``: numbered before its items are decoded (pre-order, as the
        encoder numbers them), unless it is a write-back state's own container."""
        if shared is not None and not own:
            shared.append(obj)
        return obj

    def decode(node, resolve=None, depth=0, shared=None, own=False):
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
            if tag == "ba":
                return keep(_ba_fromhex(arg), shared, own)
            if tag == "dc" and _len(arg) <= 4096:
                return _import("decimal").Decimal(arg)
        elif n == 2 and _type(node[1]) is list:
            items, deeper = node[1], depth + 1
            if tag in builders:
                if shared is None or tag == "t" or tag == "F":
                    return builders[tag]([decode(x, resolve, deeper, shared) for x in items])
                out = keep(builders[tag](), shared, own)
                (out.extend if tag == "l" else out.update)([decode(x, resolve, deeper, shared) for x in items])
                return out
            if tag == "it" and _len(items) <= WIRE_MAX_ITEMS:
                return _iter([decode(x, resolve, deeper, shared) for x in items])
            if tag == "d" or tag == "od":
                out = keep(_dict() if tag == "d" else _import("collections").OrderedDict(), shared, own)
                out.update(pairs_of(items, resolve, depth, shared))
                return out
            if tag == "Ct":
                out = keep(_import("collections").Counter(), shared, own)
                out.update(_dict(pairs_of(items, resolve, depth, shared)))  # empty: dict.update, counts as sent
                return out
            if tag == "dk" or tag == "odk":
                kind = _dict if tag == "dk" else _import("collections").OrderedDict
                return kind.fromkeys([decode(x, resolve, deeper, shared) for x in items]).keys()
            if tag == "dv" or tag == "odv":
                kind = _dict if tag == "dv" else _import("collections").OrderedDict
                return kind(_zip(_range(_len(items)), [decode(x, resolve, deeper, shared) for x in items])).values()
            if tag == "di" or tag == "odi":
                kind = _dict if tag == "di" else _import("collections").OrderedDict
                pairs = [decode(x, resolve, deeper, shared) for x in items]
                if any(_type(p) is not tuple or _len(p) != 2 for p in pairs):
                    raise Unplain("bad items view")
                return kind(pairs).items()
            if tag == "R" and resolve is not None:
                return resolve(items)
        elif n == 2 and tag == "@" and shared is not None and not own and _type(node[1]) is int:
            if 0 <= node[1] < _len(shared):  # a container already built (an alias, or an ancestor: a cycle)
                return shared[node[1]]
        elif n == 3 and tag == "c" and _type(node[1]) is str and _type(node[2]) is str:
            if _len(node[1]) <= 64 and _len(node[2]) <= 64:
                return _complex(_float(node[1]), _float(node[2]))
        elif n == 3 and tag == "dd" and (node[1] is None or node[1] in factories) and _type(node[2]) is list:
            factory = factories[node[1]] if node[1] is not None else None
            out = keep(_import("collections").defaultdict(factory), shared, own)
            out.update(pairs_of(node[2], resolve, depth, shared))
            return out
        elif n == 3 and tag == "dq" and (node[1] is None or _type(node[1]) is str) and _type(node[2]) is list:
            size = None if node[1] is None else big_int(node[1])
            if size is not None and (size < 0 or size < _len(node[2])):  # no encoder sends more than it holds
                raise Unplain("bad deque")
            out = keep(_import("collections").deque((), size), shared, own)
            out.extend([decode(x, resolve, depth + 1, shared) for x in node[2]])
            return out
        elif n == 3 and tag == "fr":
            return _import("fractions").Fraction(big_int(node[1]), big_int(node[2]))
        elif n == 4 and tag == "rg":
            return _range(big_int(node[1]), big_int(node[2]), big_int(node[3]))
        elif n == 4 and tag == "da":
            return _import("datetime").date(*small_ints(node[1:]))
        elif n == 4 and tag == "td":
            return _import("datetime").timedelta(*small_ints(node[1:]))
        elif n == 5 and tag == "tz":
            return tzinfo_of(node)
        elif n == 7 and tag == "tm":
            *fields, fold = small_ints(node[1:6])
            return _import("datetime").time(*fields, tzinfo=tzinfo_of(node[6]), fold=fold)
        elif n == 10 and tag == "dt":
            *fields, fold = small_ints(node[1:9])
            return _import("datetime").datetime(*fields, tzinfo=tzinfo_of(node[9]), fold=fold)
        elif n == 4 and tag == "nt" and _type(node[2]) is list and _type(node[3]) is list:
            typename, fields, values = node[1], node[2], node[3]
            if _len(values) != _len(fields) or not names_ok(typename, fields):
                raise Unplain("bad namedtuple")
            key = (typename, _tuple(fields))
            kind = named.get(key)
            if kind is None:
                if _len(named) >= WIRE_MAX_NAMEDTUPLES:
                    raise Unplain("too many namedtuple classes")
                kind = named[key] = _import("collections").namedtuple(typename, fields)
            return _tuple_new(kind, [decode(x, resolve, depth + 1, shared) for x in values])
        raise Unplain(f"bad value tag {tag[:20]!r}")

    def safe_decode(node, resolve=None, shared=None, own=False):
        """:func:`decode`, with every failure (a bad number, an unhashable set item, ...) as ``Unplain``."""
        try:
            return decode(node, resolve, 0, shared, own)
        except Unplain:
            raise
        except (ValueError, TypeError, RecursionError, OverflowError, ZeroDivisionError, ArithmeticError) as err:
            raise Unplain(f"{type(err).__name__}") from None

    def safe_encode(value, ref=None, shared=None, own=False):
        """:func:`encode` (positional ``depth`` not exposed)."""
        return encode(value, ref, 0, shared, own)

    return safe_encode, safe_decode, Unplain
