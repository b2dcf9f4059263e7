"""Family ``dynamic_code``: code the analysis cannot see.

``exec``/``compile`` of a non-literal (``eval`` of a computed string is common in honest code and passes), any
``__import__`` call, ``importlib.import_module``/``reload`` of a non-literal, ``runpy``, ``pickle``/``marshal``
``loads``/``load``, ``getattr``/``setattr``/``delattr`` with a computed name on a sensitive module. Literal code
given to ``exec``/``eval``/``compile`` is analysed by the ``nested_code`` family (:mod:`.nested`).
"""

from __future__ import annotations

import ast

from .context import IMPORT_CALLS, ScanContext, builtin_call, first_argument
from .helpers import SENSITIVE_MODULES, UNPICKLERS, call_name, str_constant
from .registry import register_detector


@register_detector("dynamic_code")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"dynamic_code"}`` when the program runs or imports code it computes (module docstring)."""
    return {"dynamic_code"} if _hides_code(ctx) else set()


def _hides_code(ctx: ScanContext) -> bool:
    for node in ctx.nodes(ast.Attribute):
        if node.attr == "__import__":
            return True
        owner = ctx.resolve(node.value)
        if owner is not None:
            top = owner.split(".")[0]
            if (top in UNPICKLERS and node.attr in ("loads", "load", "Unpickler")) or top == "runpy":
                return True
    for node in ctx.nodes(ast.Call):
        name = call_name(node)
        literal = str_constant(first_argument(node))
        if name in ("exec", "compile") and literal is None and builtin_call(ctx, node):
            return True
        if name == "__import__":
            return True
        if name in IMPORT_CALLS and (literal is None or name == "reload"):
            if name in ("import_module", "reload", "run_module", "run_path"):
                return True
    for _, args in ctx.dynamic_attributes():
        if str_constant(args[1]) is None:
            module = ctx.resolve(args[0])
            if module is not None and module.split(".")[0] in SENSITIVE_MODULES:
                return True
    return False
