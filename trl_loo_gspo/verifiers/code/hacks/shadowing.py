"""Family ``builtin_shadowing``: a built-in name rebound where the tests would see it.

A module-level binding of a built-in name (assignment, ``def``, ``class``, ``for``/``with``/``except`` target,
walrus, renaming import such as ``from x import y as sorted``), ``global <builtin>``, or writing a built-in name into
``globals()`` or ``__main__``. Class-level and function-local bindings shadow nothing for the tests (they look names
up in the module namespace, then in builtins), and ``input``, ``print``, ``exit``, ``quit``, ``help``,
``copyright``, ``credits`` and ``license`` are exempt (:data:`~.helpers.REBINDABLE`). Given the row, the signal
counts only when a test can see a shadowed name (:func:`tests_can_see`).
"""

from __future__ import annotations

import ast

from .context import COMPUTED, ScanContext
from .helpers import BUILTIN_NAMES, FUNCTIONS, REBINDABLE, SCOPES, SHADOWABLE, call_name, str_constant, walk
from .nested import nested_scans
from .registry import register_detector

__all__ = ["shadowed_names", "tests_can_see"]

_DYNAMIC_TEST_CALLS = {"eval", "exec", "compile", "globals", "vars", "locals", "getattr", "__import__"}


@register_detector("builtin_shadowing")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"builtin_shadowing"}`` when the program shadows a built-in name (and, given the row, a test can see it)."""
    shadowed = shadowed_names(ctx)
    if not shadowed or (ctx.row_given and not tests_can_see(shadowed, ctx.tests or [])):
        return set()
    return {"builtin_shadowing"}


def shadowed_names(ctx: ScanContext) -> set[str]:
    """The built-in names the program rebinds where the tests would see them; ``"*"`` stands for a binding whose
    name is computed (e.g. ``globals()[name] = ...``). Literal code given to ``exec``/... counts too."""
    return ctx.cached("shadowed", lambda: _shadowed(ctx))


def _shadowed(ctx: ScanContext) -> set[str]:
    shadowed: set[str] = set()
    for node in ctx.nodes(ast.Attribute):  # sys.modules["__main__"].sorted = ...
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node.attr in SHADOWABLE:
            module = ctx.tampered_module(node.value)
            if module is not None and module.split(".")[0] == "__main__":
                shadowed.add(node.attr)
    for key in ctx.namespace_keys():  # globals()["sorted"] = ...
        name = str_constant(key) if key is not COMPUTED else None
        if name is None:
            shadowed.add("*")
        elif name in SHADOWABLE:
            shadowed.add(name)
    for node in ctx.namespace_updates():  # globals().update(sorted=...)
        shadowed |= {k.arg for k in node.keywords if k.arg in SHADOWABLE}
    for name, args in ctx.dynamic_attributes():  # setattr(sys.modules[__name__], "sorted", ...)
        attr = str_constant(args[1])
        if name in ("setattr", "delattr") and attr in SHADOWABLE:
            module = ctx.tampered_module(args[0])
            if module is not None and module.split(".")[0] == "__main__":
                shadowed.add(attr)
    for node in ctx.nodes(ast.Global):
        shadowed |= SHADOWABLE.intersection(node.names)
    for inner, _ in nested_scans(ctx):
        shadowed |= shadowed_names(inner)
    shadowed |= _module_bindings(ctx.tree, walrus=bool(ctx.nodes(ast.NamedExpr)))
    return shadowed


def tests_can_see(shadowed: set[str], tests: list[str]) -> bool:
    """Whether one of ``tests`` reads a shadowed name, or reads names in ways the analysis cannot follow (``eval``,
    ``globals()``, ``getattr``, ...; a test that does not parse is assumed to see everything)."""
    if not tests:
        return False
    if "*" in shadowed:
        return True
    names: set[str] = set()
    for test in tests:
        try:
            tree = ast.parse(str(test))
            for node in walk(tree):
                if isinstance(node, ast.Name):
                    names.add(node.id)
                elif isinstance(node, ast.Call) and call_name(node) in _DYNAMIC_TEST_CALLS:
                    return True
        except Exception:  # SyntaxError, RecursionError, Unanalysable: assume it sees everything
            return True
    return bool(shadowed & names)


def _module_bindings(tree: ast.AST | None, walrus: bool) -> set[str]:
    """Built-in names bound in the module namespace (what the tests' name lookups see); ``walrus``: the program
    has ``:=`` somewhere."""
    bound: set[str] = set()

    def bind(name: str | None) -> None:
        if name and name in BUILTIN_NAMES and name not in REBINDABLE:
            bound.add(name)

    def bind_target(target: ast.AST | None) -> None:
        if isinstance(target, ast.Name):
            bind(target.id)
            return
        if target is None:
            return
        for node in walk(target, skip=SCOPES):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bind(node.id)

    def walrus_expr(expr: ast.AST) -> None:
        for child in walk(expr, skip=SCOPES):
            if isinstance(child, ast.NamedExpr):
                bind_target(child.target)

    body = getattr(tree, "body", None)
    todo = list(body) if isinstance(body, list) else []
    top_level = {id(s) for s in todo}
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (*FUNCTIONS, ast.ClassDef)):
            # code_spans analyses a method on its own, wrapped in a Module: an indented def is not top-level
            if not (id(stmt) in top_level and getattr(stmt, "col_offset", 0) > 0):
                bind(stmt.name)
            exprs = list(getattr(stmt, "decorator_list", []))
            if isinstance(stmt, ast.ClassDef):
                exprs += stmt.bases + [k.value for k in stmt.keywords]
            else:
                exprs += [d for d in (*stmt.args.defaults, *stmt.args.kw_defaults) if d is not None]
            for expr in exprs if walrus else ():
                walrus_expr(expr)
            continue
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bind(alias.asname or alias.name.split(".")[0])
            continue
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if alias.asname and alias.asname != alias.name:
                    bind(alias.asname)
            continue
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                bind_target(target)
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            if not (isinstance(stmt, ast.AnnAssign) and stmt.value is None):
                bind_target(stmt.target)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            bind_target(stmt.target)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                bind_target(item.optional_vars)
        elif isinstance(stmt, ast.ExceptHandler):
            bind(stmt.name)
        elif type(stmt).__name__ == "match_case":
            for node in walk(stmt.pattern):
                bind(getattr(node, "name", None) or getattr(node, "rest", None))
        if walrus:  # names bound by := in the statement's own expressions (comprehensions included)
            for field in stmt._fields:
                value = getattr(stmt, field, None)
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, ast.AST) and not isinstance(item, (ast.stmt, ast.ExceptHandler)):
                        if type(item).__name__ != "match_case":
                            walrus_expr(item)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(stmt, field, None)
            if isinstance(children, list):
                todo.extend(c for c in children if isinstance(c, ast.AST))
    return bound
