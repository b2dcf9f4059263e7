"""Family ``file_access``: reading the sandbox's files (the tests, ``/proc``).

``open``/``os.listdir``/``os.walk``/``glob``/``read_text``/... calls, ``os.write``, importing ``linecache``/
``fileinput``, and string literals (docstrings excepted) mentioning ``/proc/``, ``/sandbox``, ``/dev/fd`` or, when
path-like (no blank, or a ``/``, ``\\`` or ``.py``), ``test``/``tests``/``test_*.py``.
"""

from __future__ import annotations

import ast
import re

from .context import ScanContext
from .helpers import call_name, module_signals
from .registry import register_detector

_FILE_CALLS = {"open", "listdir", "walk", "scandir", "glob", "iglob", "read_text", "read_bytes"}
_PATH_WORD = re.compile(r"\btests?\b|test_\w*\.py")
_PATH_ALWAYS = re.compile(r"/proc/|/sandbox|/dev/fd")


@register_detector("file_access")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"file_access"}`` when the program reads files or names the sandbox's paths (module docstring)."""
    return {"file_access"} if _reads_files(ctx) else set()


def _reads_files(ctx: ScanContext) -> bool:
    if any("file_access" in module_signals(module) for module in ctx.named_modules()):
        return True
    for node in ctx.nodes(ast.Call):
        name, func = call_name(node), node.func
        if name in _FILE_CALLS or (
            name == "write" and isinstance(func, ast.Attribute) and ctx.resolve(func.value) == "os"
        ):
            return True
    docstrings = ctx.docstrings
    return any(
        isinstance(node.value, str) and id(node) not in docstrings and _names_a_path(node.value)
        for node in ctx.nodes(ast.Constant)
    )


def _names_a_path(text: str) -> bool:
    if _PATH_ALWAYS.search(text):
        return True
    pathlike = not re.search(r"\s", text.strip()) or "/" in text or "\\" in text or ".py" in text
    return bool(pathlike and _PATH_WORD.search(text))
