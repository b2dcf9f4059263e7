"""Family ``mock_any``: ``unittest.mock`` (or the ``mock`` package), whose ``ANY`` equals everything.

Any form: ``import unittest.mock``, ``from unittest import mock``, ``from unittest.mock import ANY``,
``unittest.mock.ANY``, ``X.ANY``, ``getattr(m, "ANY")``, a string naming the module as in
``__import__("unittest.mock")`` or ``sys.modules["mock"]``.
"""

from __future__ import annotations

import ast

from .context import IMPORT_CALLS, ScanContext, first_argument
from .helpers import MOCK_LITERAL, call_name, module_signals, str_constant
from .registry import register_detector


@register_detector("mock_any")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"mock_any"}`` when the program reaches ``unittest.mock`` or ``mock`` in any form."""
    return {"mock_any"} if _mocks(ctx) else set()


def _mocks(ctx: ScanContext) -> bool:
    if any("mock_any" in module_signals(module) for module in ctx.named_modules()):
        return True
    if any(name == "ANY" for _, name in ctx.from_imports()):
        return True
    for node in ctx.nodes(ast.Call):
        literal = str_constant(first_argument(node))
        if literal is not None and call_name(node) in IMPORT_CALLS and call_name(node) != "reload":
            if MOCK_LITERAL.search(literal) or literal == "unittest":
                return True
    for node in ctx.nodes(ast.Attribute):
        if node.attr == "ANY":
            return True
        owner = ctx.resolve(node.value)
        if owner is not None and owner.split(".")[0] == "unittest":
            if owner.startswith("unittest.mock") or node.attr == "mock":
                return True
    for _, args in ctx.dynamic_attributes():
        attr = str_constant(args[1])
        if attr == "ANY" or (attr == "mock" and (ctx.resolve(args[0]) or "").startswith("unittest")):
            return True
    docstrings = ctx.docstrings
    return any(
        isinstance(node.value, str) and id(node) not in docstrings and MOCK_LITERAL.search(node.value.strip())
        for node in ctx.nodes(ast.Constant)
    )
