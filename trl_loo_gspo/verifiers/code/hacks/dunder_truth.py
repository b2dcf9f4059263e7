"""Whether a comparison dunder's answer depends on its other argument: a small abstract evaluator of its body.

:func:`dunder_always` is what the ``always_equal`` family (:mod:`.always_equal`) asks of every ``__eq__``,
``__ne__``, ... it finds. Expressions are judged by :func:`_truth` (a truth value whatever the other argument, or for
an arbitrary foreign value of it), statement lists by :func:`_run_block`; both are bounded in depth.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Iterator
from typing import Any

from .helpers import SCOPES, call_name, walk

__all__ = ["VALUE_TYPES", "dunder_always"]

#: The truth value a dunder returns for a foreign value when it lies in the tests' favour.
_HACK_DIRECTION = {"__ne__": False}
#: Built-in value types: a subclass overriding a comparison dunder is flagged whatever the override does.
VALUE_TYPES = {
    "int",
    "float",
    "complex",
    "str",
    "bytes",
    "bytearray",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
    "bool",
    "UserDict",
    "UserList",
    "UserString",
    "OrderedDict",
    "defaultdict",
    "Counter",
    "deque",
    "Decimal",
    "Fraction",
}
_BUILTIN_TYPES = {*VALUE_TYPES, "object", "type", "range", "Number", "NoneType"}
_NON_NONE_CALLS = {"object", "str", "repr", "int", "float", "bool", "list", "dict", "tuple", "set", "frozenset"}
_NON_NONE_CALLS |= {"bytes", "type", "id", "hash", "len", "range", "isinstance", "ascii", "format"}
_EXPR_DEPTH = 64
_DEFER, _RAISE, _FALL = "defer", "raise", "fall"


class _Ctx:
    """What :func:`_truth` knows inside one comparison dunder."""

    def __init__(self, others: set[str], self_name: str | None, own: str | None, foreign: bool) -> None:
        self.others, self.self_name, self.own, self.foreign = others, self_name, own, foreign


def _is_notimpl(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Name) and node.id == "NotImplemented"


def _key(node: ast.AST) -> str | None:
    """A comparable form of a small expression (``None`` for a large one, so that ``ast.dump`` cannot recurse deep)."""
    if sum(1 for _ in walk(node, 64, strict=False)) >= 64:
        return None
    return ast.dump(node)


def _type_kind(node: ast.AST, ctx: _Ctx) -> str | None:
    """``"own"`` when ``node`` names the dunder's own class (or a tuple of such), ``"builtin"`` when it names (or
    a tuple contains) a built-in type, else ``None``."""
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    kinds = set()
    for item in items:
        if isinstance(item, ast.Name) and item.id in ("cls", ctx.own):
            kinds.add("own")
        elif isinstance(item, ast.Call) and call_name(item) == "type" and len(item.args) == 1:
            arg = item.args[0]
            kinds.add("own" if isinstance(arg, ast.Name) and arg.id == ctx.self_name else "other")
        elif isinstance(item, ast.Attribute) and item.attr == "__class__":
            value = item.value
            kinds.add("own" if isinstance(value, ast.Name) and value.id == ctx.self_name else "other")
        elif (isinstance(item, ast.Name) and item.id in _BUILTIN_TYPES) or (
            isinstance(item, ast.Attribute) and item.attr in _BUILTIN_TYPES
        ):
            kinds.add("builtin")
        elif isinstance(item, ast.Constant) and item.value is None:
            kinds.add("builtin")
        else:
            kinds.add("other")
    if "builtin" in kinds:
        return "builtin"
    return "own" if kinds == {"own"} else None


def _is_other(node: ast.AST, ctx: _Ctx) -> bool:
    return isinstance(node, ast.Name) and node.id in ctx.others


def _is_type_of_other(node: ast.AST, ctx: _Ctx) -> bool:
    if isinstance(node, ast.Call) and call_name(node) == "type" and len(node.args) == 1:
        return _is_other(node.args[0], ctx)
    return isinstance(node, ast.Attribute) and node.attr == "__class__" and _is_other(node.value, ctx)


def _non_none(node: ast.AST, ctx: _Ctx) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp)):
        return True
    if isinstance(node, (ast.GeneratorExp, ast.Lambda, ast.JoinedStr)):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in _NON_NONE_CALLS
    if isinstance(node, ast.Name):
        return node.id == ctx.self_name or (ctx.foreign and node.id in ctx.others)
    return False


_FLIP = {ast.Eq: True, ast.Is: True, ast.LtE: True, ast.GtE: True, ast.NotEq: False, ast.IsNot: False}
_FLIP |= {ast.Lt: False, ast.Gt: False}
_CONST_OPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le}
_CONST_OPS |= {ast.Gt: operator.gt, ast.GtE: operator.ge}
_POSITIVE = {ast.Eq, ast.Is, ast.In}


def _is_literal(node: ast.AST) -> bool:
    """A constant, or a signed number such as ``-1``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and node.value is not None


def _compare_pair(left: ast.AST, op: ast.cmpop, right: ast.AST, ctx: _Ctx) -> bool | None:
    kind = type(op)
    if kind in _FLIP:
        lkey = _key(left)
        if lkey is not None and lkey == _key(right):
            return _FLIP[kind]
    if isinstance(left, ast.Constant) and isinstance(right, ast.Constant) and kind in _CONST_OPS:
        try:
            return bool(_CONST_OPS[kind](left.value, right.value))
        except Exception:
            return None
    positive = kind in _POSITIVE
    for a, b in ((left, right), (right, left)):
        if isinstance(b, ast.Constant) and b.value is None and kind in (ast.Is, ast.IsNot, ast.Eq, ast.NotEq):
            if _non_none(a, ctx):
                return not positive
        if not ctx.foreign:
            continue
        if _is_other(a, ctx):
            if kind in (ast.Is, ast.IsNot) and isinstance(b, ast.Name) and b.id == ctx.self_name:
                return not positive
            # an arbitrary value equals one given constant (or lies in a literal list of them) with measure zero
            literal = _is_literal(b) or (
                isinstance(b, (ast.Tuple, ast.List, ast.Set)) and all(map(_is_literal, b.elts))
            )
            if literal and (kind in (ast.Eq, ast.NotEq) or (kind in (ast.In, ast.NotIn) and a is left)):
                return not positive
        if _is_type_of_other(a, ctx) and kind in (ast.Is, ast.IsNot, ast.Eq, ast.NotEq, ast.In, ast.NotIn):
            kind_of_b = _type_kind(b, ctx)
            if kind_of_b == "own":
                return not positive
            if kind_of_b == "builtin":
                return positive
    return None


def _truth(node: ast.AST | None, ctx: _Ctx, depth: int = 0) -> bool | str | None:
    """The truth value of ``node`` whatever the other argument (``ctx.foreign``: for an arbitrary foreign, non-None
    value of the other argument); ``"defer"`` for ``NotImplemented``; ``None`` when unknown."""
    if node is None:
        return False
    if depth > _EXPR_DEPTH:
        return None
    sub = depth + 1
    if isinstance(node, ast.Constant):
        try:
            return bool(node.value)
        except Exception:
            return None
    if _is_notimpl(node):
        return _DEFER
    if isinstance(node, ast.UnaryOp):
        value = _truth(node.operand, ctx, sub)
        if isinstance(node.op, ast.Not):
            return (not value) if isinstance(value, bool) else None
        if isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(value, bool):
            return value if isinstance(node.operand, ast.Constant) else None
        return None
    if isinstance(node, ast.BoolOp):
        values = [_truth(v, ctx, sub) for v in node.values]
        values = [v if isinstance(v, bool) else None for v in values]
        keys = [_key(v) for v in node.values]
        negated = {_key(v.operand) for v in node.values if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not)}
        tautology = any(k is not None and k in negated for k in keys)
        if isinstance(node.op, ast.Or):
            if True in values or tautology:
                return True
            return False if all(v is False for v in values) else None
        if False in values or tautology:
            return False
        return True if all(v is True for v in values) else None
    if isinstance(node, ast.Compare):
        results, left = [], node.left
        for op, right in zip(node.ops, node.comparators, strict=False):
            results.append(_compare_pair(left, op, right, ctx))
            left = right
        if False in results:
            return False
        return True if results and all(r is True for r in results) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, args = node.func.id, node.args
        if name == "bool" and len(args) == 1:
            value = _truth(args[0], ctx, sub)
            return value if isinstance(value, bool) else None
        if name == "isinstance" and len(args) == 2:
            if isinstance(args[1], ast.Name) and args[1].id == "object":
                return True
            if ctx.foreign and _is_other(args[0], ctx):
                kind = _type_kind(args[1], ctx)
                return {"own": False, "builtin": True}.get(kind or "")
        if name == "hasattr" and ctx.foreign and args and _is_other(args[0], ctx):
            return True
        return None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return None
        return bool(node.elts)
    if isinstance(node, ast.Dict):
        return None if any(k is None for k in node.keys) else bool(node.keys)
    if isinstance(node, (ast.Lambda, ast.GeneratorExp)):
        return True
    if isinstance(node, ast.IfExp):
        test = _truth(node.test, ctx, sub)
        if test is True:
            return _truth(node.body, ctx, sub)
        if test is False:
            return _truth(node.orelse, ctx, sub)
        body, orelse = _truth(node.body, ctx, sub), _truth(node.orelse, ctx, sub)
        return body if body == orelse and isinstance(body, bool) else None
    if isinstance(node, ast.NamedExpr):
        return _truth(node.value, ctx, sub)
    if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Tuple, ast.List)):
        index = node.slice
        elts = node.value.elts
        if (
            isinstance(index, ast.Constant)
            and type(index.value) is int
            and not any(isinstance(e, ast.Starred) for e in elts)
        ):
            if -len(elts) <= index.value < len(elts):
                value = _truth(elts[index.value], ctx, sub)
                return value if isinstance(value, bool) else None
    return None


def _own_scope(body: list[ast.AST]) -> Iterator[ast.AST]:
    """The nodes of a function body, not entering nested functions, lambdas or classes."""
    for stmt in body:
        yield from walk(stmt, skip=SCOPES)


def _binds(stmt: ast.AST, names: set[str]) -> bool:
    return any(
        isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)) and n.id in names
        for n in _own_scope([stmt])
    )


def _run_block(stmts: list[ast.stmt], ctx: _Ctx, depth: int = 0) -> set[Any]:
    """The outcomes (truth values, ``"defer"``, ``"raise"``, ``"fall"``, ``None``) of running ``stmts`` for an
    arbitrary foreign other argument; conditions of unknown truth take both branches."""
    if depth > 20:
        return {None}
    watched = ctx.others | ({ctx.self_name} if ctx.self_name else set())
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Return):
            return {_truth(stmt.value, ctx)}
        if isinstance(stmt, ast.Raise):
            return {_RAISE}
        if isinstance(stmt, ast.Assert):
            if _truth(stmt.test, ctx) is False:
                return {_RAISE}
            continue
        if isinstance(stmt, ast.If):
            test = _truth(stmt.test, ctx)
            outcomes: set[Any] = set()
            if test is not False:
                outcomes |= _run_block(stmt.body, ctx, depth + 1)
            if test is not True:
                outcomes |= _run_block(stmt.orelse, ctx, depth + 1)
            if _FALL in outcomes:
                outcomes = (outcomes - {_FALL}) | _run_block(stmts[i + 1 :], ctx, depth + 1)
            return outcomes
        inner = list(_own_scope([stmt]))
        if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for n in inner):
            return {None}  # a loop, try, with or match that may return: not followed
        if _binds(stmt, watched):
            return {None}
    return {_FALL}


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, kind: str) -> tuple[str | None, set[str]]:
    """(the ``self`` parameter, the parameters that carry the other argument) of a comparison dunder."""
    args = fn.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    rest = [a.arg for a in args.kwonlyargs] + [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    self_name = positional[0] if positional else None
    if kind == "__bool__":  # the "other argument" of __bool__ is the object itself
        return self_name, set(positional + rest)
    return self_name, set(positional[1:] + rest) if positional else set(rest)


def dunder_always(fn: ast.AST, kind: str, own: str | None = None) -> bool:
    """Whether a comparison dunder (``def`` or ``lambda``) gives the same answer whatever its other argument.

    Flagged: an ``async`` or generator dunder (always a truthy object); (A) it never reads the other argument
    (nor ``locals()``/``vars()``) and returns something other than ``NotImplemented``; (B) every return is the
    same known truth value (``return 1``, ``return not False``, ``return self is self``, ``x or not x``, ...), none
    ``NotImplemented``; (C) for an arbitrary foreign value of the other argument (not ``None``, not an instance of
    ``own``, of any built-in type that ``isinstance``/``type(...)`` tests ask about, different from any single
    literal it is compared with) every path that returns answers in the tests' favour (``True``; ``False`` for
    ``__ne__``). A dataclass-like ``__eq__`` that compares fields of the other argument is never flagged.
    """
    if isinstance(fn, ast.AsyncFunctionDef):
        return True
    if not isinstance(fn, (ast.FunctionDef, ast.Lambda)):
        return False
    self_name, others = _params(fn, kind)
    if not others:
        return False  # cannot even be called with the other argument
    body = [fn.body] if isinstance(fn, ast.Lambda) else fn.body
    own_nodes = list(_own_scope(body))
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own_nodes):
        return True
    if isinstance(fn, ast.Lambda):
        values: list[ast.AST | None] = [fn.body]
    else:
        values = [n.value for n in own_nodes if isinstance(n, ast.Return)]
        if not values:
            return False  # a stub or raise-only dunder: falls back to the default comparison or fails
        if not (body and isinstance(body[-1], (ast.Return, ast.Raise))):
            values.append(None)  # falling off the end returns None
    reads = any(
        (isinstance(n, ast.Name) and n.id in others and not isinstance(n.ctx, ast.Store))
        or (isinstance(n, ast.Call) and call_name(n) in ("locals", "vars") and not n.args)
        for stmt in body
        for n in walk(stmt)
    )
    if not reads and any(not _is_notimpl(v) for v in values):
        return True
    plain = _Ctx(others, self_name, own, foreign=False)
    truths = [_truth(v, plain) for v in values]
    if truths and all(isinstance(t, bool) for t in truths) and len(set(truths)) == 1:
        return True
    if kind == "__bool__" or len(own_nodes) > 5000:
        return False
    ctx = _Ctx(others, self_name, own, foreign=True)
    outcomes = {_truth(fn.body, ctx)} if isinstance(fn, ast.Lambda) else _run_block(fn.body, ctx)
    outcomes = {False if o == _FALL else o for o in outcomes} - {_RAISE}
    return outcomes == {_HACK_DIRECTION.get(kind, True)}
