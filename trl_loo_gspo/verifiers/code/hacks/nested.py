"""Family ``nested_code``: string literals given to ``exec``/``eval``/``compile`` are parsed and analysed like the
program (every family, two levels deep; deeper nesting is ``dynamic_code``). Their signals count for the program;
their ``builtin_shadowing`` counts through the names they shadow (:mod:`.shadowing`)."""

from __future__ import annotations

import ast

from .context import ScanContext, builtin_call, first_argument
from .helpers import call_name, str_constant
from .registry import register_detector, run_detectors

#: How deep literal code inside literal code is followed.
_NESTED_CODE_DEPTH = 2


def nested_scans(ctx: ScanContext) -> list[tuple[ScanContext, set[str]]]:
    """The analysed literal code of the program: ``(its context, its signals)`` per ``exec``/``eval``/``compile``
    of a string literal that parses (computed once per context)."""
    return ctx.cached("nested_scans", lambda: _scan_literals(ctx))


def _scan_literals(ctx: ScanContext) -> list[tuple[ScanContext, set[str]]]:
    scans: list[tuple[ScanContext, set[str]]] = []
    if ctx.depth >= _NESTED_CODE_DEPTH:
        return scans
    for source in _code_literals(ctx):
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            continue  # it would fail at run time too
        inner = ScanContext(tree, depth=ctx.depth + 1)
        scans.append((inner, run_detectors(inner)))
    return scans


def _code_literals(ctx: ScanContext) -> list[str]:
    literals = []
    for node in ctx.nodes(ast.Call):
        if call_name(node) in ("exec", "eval", "compile") and builtin_call(ctx, node):
            literal = str_constant(first_argument(node))
            if literal is not None:
                literals.append(literal)
    return literals


@register_detector("nested_code")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """The signals of the literal code the program runs (``builtin_shadowing`` excepted); ``dynamic_code`` when it
    is nested deeper than the analysis follows."""
    if ctx.depth >= _NESTED_CODE_DEPTH:
        return {"dynamic_code"} if _code_literals(ctx) else set()
    signals: set[str] = set()
    for _, inner in nested_scans(ctx):
        signals |= inner - {"builtin_shadowing"}
    return signals
