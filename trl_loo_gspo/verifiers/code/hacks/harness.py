"""Family ``harness``: an attempt to patch the interpreter or the harness (the judge's builtins and modules live in
another process, so it changes nothing there).

Writing attributes or items of ``builtins``/``__builtins__``/``sys``/``os`` or of any imported module (also through
aliases, ``__import__``, ``sys.modules[...]``, ``M.__dict__[...]``, ``vars(M)[...]``, ``setattr``/``delattr``/
``__setattr__``, dict methods), any use of the name ``__builtins__``, tracing and audit hooks (``sys.settrace``,
``sys.setprofile``, ``sys.addaudithook``, ...), import hooks and monitoring (``sys.meta_path``, ``sys.path_hooks``,
``sys.monitoring``) and importing ``ctypes``, ``_thread``, ``signal`` or ``atexit``.
"""

from __future__ import annotations

import ast

from .context import ScanContext
from .helpers import NS_MUTATORS, SYS_HOOK_ATTRS, TAMPER_CALLS, call_name, module_signals, str_constant
from .registry import register_detector


@register_detector("harness")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"harness"}`` when the program patches the interpreter or the harness (module docstring)."""
    return {"harness"} if tree is not None and _tampers(ctx) else set()


def _tampers(ctx: ScanContext) -> bool:
    if any("harness" in module_signals(module) for module in ctx.named_modules()):
        return True
    if any(
        name in TAMPER_CALLS or (module == "sys" and name in SYS_HOOK_ATTRS) for module, name in ctx.from_imports()
    ):
        return True
    if any(node.id == "__builtins__" for node in ctx.nodes(ast.Name)):
        return True
    for node in ctx.nodes(ast.Attribute):
        if node.attr in SYS_HOOK_ATTRS and ctx.resolve(node.value) == "sys":
            return True
        if isinstance(node.ctx, (ast.Store, ast.Del)) and ctx.tampered_module(node.value) is not None:
            return True
    for node in ctx.nodes(ast.Subscript):
        if isinstance(node.ctx, (ast.Store, ast.Del)) and ctx.tampered_module(node.value) is not None:
            return True
    for node in ctx.nodes(ast.Call):
        if call_name(node) in TAMPER_CALLS:
            return True
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in NS_MUTATORS:
            if ctx.tampered_module(func.value) is not None:
                return True
    for name, args in ctx.dynamic_attributes():
        owner, attr = args[0], str_constant(args[1])
        if attr is None:
            continue
        if name in ("setattr", "delattr") and ctx.tampered_module(owner) is not None:
            return True
        if attr in SYS_HOOK_ATTRS and ctx.resolve(owner) == "sys":
            return True
    return False
