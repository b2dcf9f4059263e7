"""Family ``early_exit``: a module-level ``sys.exit``/``os._exit``/``exit``/``quit``/``os.kill``/``os.abort`` (not
inside a function, a class or an ``if``): an attempt to end the run before the tests report (the judge reads a
run that ends without its report as a failure)."""

from __future__ import annotations

import ast

from .context import ScanContext
from .helpers import EXIT_CALLS, FUNCTIONS, call_name, walk
from .registry import register_detector


@register_detector("early_exit")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"early_exit"}`` when a module-level statement calls an exit function."""
    if not any(call_name(node) in EXIT_CALLS for node in ctx.nodes(ast.Call)):
        return set()
    body = getattr(tree, "body", None)
    for stmt in body if isinstance(body, list) else []:  # not inside functions or `if __name__ == ...` guards
        if isinstance(stmt, (*FUNCTIONS, ast.ClassDef, ast.If)):
            continue
        for node in walk(stmt):
            if isinstance(node, ast.Call) and call_name(node) in EXIT_CALLS:
                return {"early_exit"}
    return set()
