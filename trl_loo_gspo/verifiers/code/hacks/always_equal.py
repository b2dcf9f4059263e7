"""Family ``always_equal``: forging an equality — comparisons that answer the same whatever they are compared with
(the judge compares plain data it rebuilt itself, so a returned object of the program is never compared).

A comparison dunder (``__eq__``, ``__ne__``, ``__lt__``, ``__le__``, ``__gt__``, ``__ge__``, ``__contains__``,
``__bool__``) whose result does not depend on its other argument, wherever it is defined (``def`` in a class,
``__eq__ = lambda s, o: True``, ``type("X", (), {"__eq__": ...})``, ``X.__eq__ = ...``, ``setattr(X, "__eq__", ...)``),
judged by :func:`~.dunder_truth.dunder_always`; a comparison dunder assigned from something that cannot be checked
(``__eq__ = object.__ne__``, an unresolved name, a call); a class deriving from a built-in value type (``int``,
``str``, ``list``, ``dict``, ...) that overrides a comparison dunder; a comparison dunder's name in a string literal
outside those forms (``locals()["__eq__"] = ...``).
"""

from __future__ import annotations

import ast

from .context import ScanContext
from .dunder_truth import VALUE_TYPES, dunder_always
from .helpers import COMPARE_DUNDERS, FUNCTIONS, str_constant
from .registry import register_detector


@register_detector("always_equal")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"always_equal"}`` when a comparison of the program's objects cannot fail (module docstring)."""
    return {"always_equal"} if _always_equal(ctx) else set()


def _always_equal(ctx: ScanContext) -> bool:
    handled: set[int] = set()  # ids of dunder definitions and of string constants already judged in context
    for name, args in ctx.dynamic_attributes():
        attr = str_constant(args[1])
        if attr is None:
            continue
        handled.add(id(args[1]))
        if attr in COMPARE_DUNDERS:
            if name == "setattr" and len(args) >= 3:
                if _assigned_always(ctx, args[2], attr):
                    return True
            elif name in ("setattr", "delattr", "getattr"):
                return True
    if any(_class_always(ctx, node, handled) for node in ctx.nodes(ast.ClassDef)):
        return True
    for node in ctx.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
        if node.name in COMPARE_DUNDERS and id(node) not in handled and dunder_always(node, node.name):
            return True
    for node in ctx.nodes(ast.Assign, ast.AnnAssign, ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in COMPARE_DUNDERS:  # X.__eq__ = ...
                if _assigned_always(ctx, node.value, target.attr):
                    return True
    for node in ctx.nodes(ast.Dict):  # type("X", (), {"__eq__": ...})
        for key, value in zip(node.keys, node.values, strict=False):
            if isinstance(key, ast.Constant) and key.value in COMPARE_DUNDERS:
                handled.add(id(key))
                if _assigned_always(ctx, value, key.value):
                    return True
    for node in ctx.nodes(ast.keyword):
        if node.arg in COMPARE_DUNDERS and _assigned_always(ctx, node.value, node.arg):
            return True
    docstrings = ctx.docstrings
    return any(
        isinstance(node.value, str)
        and node.value in COMPARE_DUNDERS
        and id(node) not in handled
        and id(node) not in docstrings
        for node in ctx.nodes(ast.Constant)
    )


def _class_always(ctx: ScanContext, node: ast.ClassDef, handled: set[int]) -> bool:
    """The comparison dunders a class body defines (also under ``if``/``try``/``with``), judged; a subclass of a
    built-in value type is flagged for any override."""
    value_base = any(
        (isinstance(b, ast.Name) and b.id in VALUE_TYPES) or (isinstance(b, ast.Attribute) and b.attr in VALUE_TYPES)
        for b in node.bases
    )
    local = {s.name: s for s in node.body if isinstance(s, FUNCTIONS)}
    todo = list(node.body)
    flagged = False
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, FUNCTIONS):
            if stmt.name in COMPARE_DUNDERS:
                handled.add(id(stmt))
                if value_base or dunder_always(stmt, stmt.name, node.name):
                    flagged = True
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in COMPARE_DUNDERS and stmt.value is not None:
                    if value_base or _assigned_always(ctx, stmt.value, target.id, node.name, local):
                        flagged = True
        elif isinstance(stmt, (ast.If, ast.Try, ast.With)) or type(stmt).__name__ == "TryStar":
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(stmt, field, None) or []:
                    todo.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])
    return flagged


def _assigned_always(
    ctx: ScanContext, value: ast.AST | None, kind: str, own: str | None = None, local: dict[str, ast.AST] | None = None
) -> bool:
    """Judge an object assigned to a comparison dunder (``__eq__ = value``): a lambda or a function it names is
    checked with :func:`~.dunder_truth.dunder_always`; ``None`` disables the comparison; the same dunder of another
    class (``__eq__ = int.__eq__``) delegates; anything else cannot be checked and is flagged."""
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return False
    if isinstance(value, ast.Lambda):
        return dunder_always(value, kind, own)
    if isinstance(value, ast.Name):
        target = (local or {}).get(value.id) or ctx.functions.get(value.id)
        swapped = isinstance(target, FUNCTIONS) and target.name in COMPARE_DUNDERS and target.name != kind
        return target is None or swapped or dunder_always(target, kind, own)
    if isinstance(value, ast.Attribute):
        return value.attr != kind
    return True
