"""Family ``encoding_cookie`` (source text only, not in the AST): a PEP 263 coding declaration under which the
interpreter would read different text than the analysis did (e.g. ``utf-7``)."""

from __future__ import annotations

import ast
import codecs
import re

from .context import ScanContext
from .registry import register_detector

__all__ = ["encoding_cookie"]

_COOKIE = re.compile(r"[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)
_SPLITLINES = "\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]"  # what str.splitlines splits on


def encoding_cookie(code: str) -> str | None:
    """The encoding a PEP 263 coding declaration makes the interpreter read ``code`` in, when that gives different
    text than ``code`` itself; ``None`` when there is no declaration or it is harmless.

    A declaration counts on either of the first two lines (split on ``\\r\\n``, ``\\r``, ``\\n`` and on
    :meth:`str.splitlines`, to be safe), with CPython's pattern ``^[ \\t\\f]*#.*?coding[:=][ \\t]*([-\\w.]+)``.
    It is harmless when the encoding is UTF-8 (any alias, or CPython's ``utf-8-*`` spelling) or when decoding the
    program's UTF-8 bytes with it gives back exactly ``code`` (e.g. ``latin-1`` on a pure-ASCII program). An
    unknown encoding is returned as declared. The program file is assumed to be written as UTF-8.
    """
    try:
        for pattern in (r"\r\n|\r|\n", _SPLITLINES):
            for i, line in enumerate(re.split(pattern, code, maxsplit=2)[:2]):
                match = _COOKIE.match(line.lstrip("\ufeff") if i == 0 else line)
                if match and not _harmless_encoding(match.group(1), code):
                    return match.group(1)
    except Exception:  # never raise: a declaration we cannot judge is reported as such
        return "unknown"
    return None


def _harmless_encoding(name: str, code: str) -> bool:
    lowered = name.lower().replace("_", "-")
    if lowered in ("utf-8", "utf8") or lowered.startswith("utf-8-"):
        return True
    try:
        codec = codecs.lookup(name)
    except LookupError:
        return False
    if codec.name == "utf-8":
        return True
    try:
        return code.encode("utf-8").decode(codec.name) == code
    except Exception:  # UnicodeError, a codec that is not text, ...
        return False


@register_detector("encoding_cookie")
def detect(tree: ast.AST | None, source: str | None, ctx: ScanContext) -> set[str]:
    """``{"encoding_cookie"}`` when the program text declares an encoding that changes it."""
    return {"encoding_cookie"} if source is not None and encoding_cookie(source) is not None else set()
