"""Family ``hardcoded_output``: an expected io output appears verbatim in a string literal of the program (the row's
``io_cases`` are needed; a program that does not parse is searched as a whole)."""

from __future__ import annotations

import ast
from typing import Any

from .context import ScanContext
from .helpers import normalize_output, string_literals
from .registry import register_detector

__all__ = ["hardcoded_output"]


def hardcoded_output(literals: list[str], io_cases: list[dict[str, Any]]) -> bool:
    """An expected io output (at least 8 characters or several lines) appears verbatim in one of the literals."""
    for case in io_cases:
        want = normalize_output(str(case.get("output", "")))
        if (len(want) >= 8 or "\n" in want) and any(want in normalize_output(lit) for lit in literals):
            return True
    return False


@register_detector("hardcoded_output")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"hardcoded_output"}`` when an expected output of the row's ``io_cases`` is written into the program."""
    if not ctx.io_cases:
        return set()
    literals = string_literals(tree) if tree is not None else [source] if source is not None else []
    return {"hardcoded_output"} if hardcoded_output(literals, ctx.io_cases) else set()
