"""Plain data across the sandbox boundary, and a capped evaluator for the host side of a split assert.

Values computed inside the sandbox come back as a tagged JSON tree written by the trusted runner
(``sandbox/runner.py``); :func:`decode` rebuilds them on the host, strictly, as objects of builtin types only — so
the comparison that decides a test runs on the host, on values whose ``__eq__`` is Python's own. The format (one
JSON value per node)::

    null | true | false                 None, True, False
    ["i", "<decimal>"]                  int (exact type; no subclass)
    ["f", "<repr>"]                     float (repr, incl. inf / nan)
    ["c", "<repr real>", "<repr imag>"] complex
    ["s", "<text>"]                     str
    ["b", "<hex>"]                      bytes
    ["l" | "t" | "S" | "F", [...]]      list, tuple, set, frozenset
    ["d", [[key, value], ...]]          dict (also collections.Counter / OrderedDict / defaultdict: compared as
                                        the plain dict Python's own == compares them as); a dict_keys view is a set
    ["it", [...]]                       an iterator (generator, map, filter, zip, ...), consumed in the sandbox:
                                        an :class:`IteratorValue` on the host, equal to nothing but itself (as a
                                        generator is), iterable (``list(candidate(x)) == [...]`` works)

Anything else is rejected by the runner (the test fails with ``unserialisable: <type>``) and, should a tampered
runner send it anyway, by :func:`decode` (``PlainDataError``).

:func:`host_eval` evaluates the host side of a split assert (written by :mod:`.assert_split` as an ``ast``
expression whose leaves are constants, whitelisted builtins and placeholders for the sandbox's values). It is written
by hand because Python has no evaluator for a *safe* subset (``ast.literal_eval`` has no calls and no comparisons):
only the node types and functions listed here exist, and every operation whose cost depends on its operands' values
(``**``, ``<<``, sequence repetition, ``range``) is capped, so a dataset row or a returned value cannot stall the
trainer process.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

#: Nesting depth beyond which a value is refused (a deeper tree is not a plausible answer, and recursion on it
#: would be the host's risk).
MAX_DEPTH = 100
#: Largest sequence or ``range`` the host evaluator builds, and the largest int (in bits) it computes.
MAX_ITEMS = 1_000_000
MAX_INT_BITS = 100_000

_INT = re.compile(r"-?[0-9]+\Z")


class PlainDataError(ValueError):
    """A value from the sandbox is not the plain data it must be."""


class HostEvalError(ValueError):
    """The host side of an assert uses something the capped evaluator does not support, or exceeds a cap."""


class IteratorValue:
    """What an iterator returned by the program yielded; iterable once more on the host, equal only to itself."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def __iter__(self):
        return iter(self._items)

    def __repr__(self) -> str:
        return f"<iterator of {len(self._items)} items>"


# -- decoding ------------------------------------------------------------------------------------------------


def decode(node: Any, depth: int = 0) -> Any:
    """Rebuild one value of the tagged format (module docstring) as builtin objects; raise :class:`PlainDataError`."""
    if depth > MAX_DEPTH:
        raise PlainDataError("value nested too deeply")
    if node is None or node is True or node is False:
        return node
    if type(node) is not list or not node or type(node[0]) is not str:
        raise PlainDataError(f"not a tagged value: {type(node).__name__}")
    tag, args = node[0], node[1:]
    if tag == "i" and len(args) == 1 and type(args[0]) is str and _INT.match(args[0]):
        if len(args[0]) > MAX_INT_BITS // 3:
            raise PlainDataError("int too large")
        return int(args[0])
    if tag == "f" and len(args) == 1 and type(args[0]) is str:
        return _float(args[0])
    if tag == "c" and len(args) == 2 and all(type(a) is str for a in args):
        return complex(_float(args[0]), _float(args[1]))
    if tag == "s" and len(args) == 1 and type(args[0]) is str:
        return args[0]
    if tag == "b" and len(args) == 1 and type(args[0]) is str:
        try:
            return bytes.fromhex(args[0])
        except ValueError as err:
            raise PlainDataError("bad bytes") from err
    if tag in ("l", "t", "S", "F") and len(args) == 1 and type(args[0]) is list:
        items = [decode(item, depth + 1) for item in args[0]]
        try:
            return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
        except TypeError as err:  # an unhashable element of a set
            raise PlainDataError(str(err)) from err
    if tag == "it" and len(args) == 1 and type(args[0]) is list:
        return IteratorValue([decode(item, depth + 1) for item in args[0]])
    if tag == "d" and len(args) == 1 and type(args[0]) is list:
        out = {}
        for pair in args[0]:
            if type(pair) is not list or len(pair) != 2:
                raise PlainDataError("bad dict item")
            try:
                out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
            except TypeError as err:
                raise PlainDataError(str(err)) from err
        return out
    raise PlainDataError(f"unknown tag {tag!r}")


def _float(text: str) -> float:
    if len(text) > 64:
        raise PlainDataError("float repr too long")
    try:
        return float(text)
    except ValueError as err:
        raise PlainDataError("bad float") from err


# -- the capped host evaluator -------------------------------------------------------------------------------


def _checked_range(*args: int) -> range:
    r = range(*args)
    if len(r) > MAX_ITEMS:
        raise HostEvalError("range too long")
    return r


def _pow(a: Any, b: Any, mod: Any = None) -> Any:
    if mod is None and type(a) is int and type(b) is int and b > 0 and a not in (0, 1, -1):
        if a.bit_length() * b > MAX_INT_BITS:
            raise HostEvalError("power too large")
    return pow(a, b, mod) if mod is not None else a**b


def _mul(a: Any, b: Any) -> Any:
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (str, bytes, list, tuple)) and type(n) is int and len(seq) * max(n, 0) > MAX_ITEMS:
            raise HostEvalError("repetition too large")
    return a * b


def _lshift(a: Any, b: Any) -> Any:
    if type(b) is int and b > MAX_INT_BITS:
        raise HostEvalError("shift too large")
    return a << b


BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _pow,
    ast.LShift: _lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.BitXor: operator.xor,
}
UNARYOPS: dict[type, Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}

#: Builtins the host evaluator calls (on host values only: constants and decoded plain data).
HOST_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "len": len,
    "min": min,
    "max": max,
    "sum": sum,
    "sorted": sorted,
    "list": list,
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "dict": dict,
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "complex": complex,
    "range": _checked_range,
    "isinstance": isinstance,
    "all": all,
    "any": any,
    "chr": chr,
    "ord": ord,
    "divmod": divmod,
    "pow": _pow,
    "repr": repr,
}
#: Names of builtin types usable as values (``isinstance(x, int)``) on the host.
HOST_TYPES: dict[str, type] = {
    t.__name__: t for t in (int, float, str, bool, list, tuple, dict, set, frozenset, bytes, complex)
}
#: ``math.<name>`` the host evaluator knows (functions and constants).
HOST_MATH: dict[str, Any] = {
    name: getattr(math, name)
    for name in (
        "isclose fabs sqrt floor ceil log log2 log10 exp trunc gcd hypot sin cos tan atan pi e inf nan tau".split()
    )
}


def host_eval(node: ast.AST, env: dict[str, Any]) -> Any:
    """Evaluate a host-side expression; ``env`` maps names (placeholders, host constants) to values.

    Raises :class:`HostEvalError` for anything outside the supported subset or over a cap; operations on the
    values themselves may raise their own ``TypeError``/``ValueError``/... (the caller turns them into a fail).
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in HOST_TYPES:
            return HOST_TYPES[node.id]
        raise HostEvalError(f"unknown name {node.id!r}")
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [host_eval(e, env) for e in node.elts]
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise HostEvalError("dict unpacking")
        return {host_eval(k, env): host_eval(v, env) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARYOPS:
        return UNARYOPS[type(node.op)](host_eval(node.operand, env))
    if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
        return BINOPS[type(node.op)](host_eval(node.left, env), host_eval(node.right, env))
    if isinstance(node, ast.BoolOp):
        value: Any = None
        for operand in node.values:
            value = host_eval(operand, env)
            if isinstance(node.op, ast.And) and not value or isinstance(node.op, ast.Or) and value:
                return value
        return value
    if isinstance(node, ast.Compare):
        left = host_eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = host_eval(comparator, env)
            if not CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return host_eval(node.body if host_eval(node.test, env) else node.orelse, env)
    if isinstance(node, ast.Subscript):
        container = host_eval(node.value, env)
        return container[_index(node.slice, env)]
    if isinstance(node, ast.Attribute) and _is_math(node.value, env) and node.attr in HOST_MATH:
        return HOST_MATH[node.attr]
    if isinstance(node, ast.Call):
        func = host_function(node.func, env)
        if func is None:
            raise HostEvalError(f"call of {ast.unparse(node.func)!r}")
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise HostEvalError("star arguments")
        args = [host_eval(a, env) for a in node.args]
        kwargs = {k.arg: host_eval(k.value, env) for k in node.keywords}
        return func(*args, **kwargs)
    raise HostEvalError(f"unsupported expression {type(node).__name__}")


def host_function(func: ast.AST, env: dict[str, Any] | None = None) -> Callable[..., Any] | None:
    """The host callable a call's ``func`` names (a whitelisted builtin or ``math.<name>``), else ``None``."""
    env = env or {}
    if isinstance(func, ast.Name) and func.id not in env:
        return HOST_FUNCTIONS.get(func.id)
    if isinstance(func, ast.Attribute) and _is_math(func.value, env) and callable(HOST_MATH.get(func.attr)):
        return HOST_MATH[func.attr]
    return None


def _is_math(node: ast.AST, env: dict[str, Any]) -> bool:
    return isinstance(node, ast.Name) and node.id == "math" and "math" not in env


def _index(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Slice):
        parts = [None if p is None else host_eval(p, env) for p in (node.lower, node.upper, node.step)]
        return slice(*parts)
    return host_eval(node, env)
