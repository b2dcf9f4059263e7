"""Family ``frame_access``: introspection to reach the test or the harness (other frames, tracebacks, the object
graph); in the sandbox the test runs in another process, so the walk finds only the program's own runner.

``sys._getframe``, ``sys._current_frames``, ``inspect.currentframe``/``stack``/``trace``/..., frame, traceback and
generator attributes (``f_back``, ``f_globals``, ``tb_frame``, ``gi_frame``, ``__traceback__``, ``__globals__``,
``__subclasses__``, ...) read, written or named by a string, ``sys.exc_info``/``sys.exception``/
``sys.last_traceback``, ``traceback.walk_stack``/``walk_tb``, ``gc.get_objects``/..., ``sys.modules``, importing
``__main__``.
"""

from __future__ import annotations

import ast

from .context import ScanContext
from .helpers import FRAME_NAMES, INSPECT_FRAME_ATTRS, SYS_FRAME_ATTRS, call_name, module_signals, str_constant
from .registry import register_detector


@register_detector("frame_access")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"frame_access"}`` when the program reaches frames, tracebacks or the harness's objects."""
    return {"frame_access"} if _reaches_frames(ctx) else set()


def _reaches_frames(ctx: ScanContext) -> bool:
    if any("frame_access" in module_signals(module) for module in ctx.named_modules()):
        return True
    for module, name in ctx.from_imports():
        if name in FRAME_NAMES or (module == "sys" and name in SYS_FRAME_ATTRS):
            return True
        if module == "inspect" and name in INSPECT_FRAME_ATTRS:
            return True
    for node in ctx.nodes(ast.Attribute):
        if node.attr in FRAME_NAMES:
            return True
        owner = ctx.resolve(node.value)
        if owner is not None:
            if (owner == "sys" and node.attr in SYS_FRAME_ATTRS) or owner.split(".")[0] == "__main__":
                return True
            if owner == "inspect" and node.attr in INSPECT_FRAME_ATTRS:
                return True
    if any(call_name(node) in FRAME_NAMES for node in ctx.nodes(ast.Call)):
        return True
    for _, args in ctx.dynamic_attributes():
        owner, attr = args[0], str_constant(args[1])
        if attr in FRAME_NAMES or (attr in SYS_FRAME_ATTRS and ctx.resolve(owner) == "sys"):
            return True
    docstrings = ctx.docstrings
    return any(
        isinstance(node.value, str) and node.value in FRAME_NAMES and id(node) not in docstrings
        for node in ctx.nodes(ast.Constant)
    )
