"""Fenced blocks (```` ```lang ... ``` ````) in a completion, found in linear time.

The verifiers used to find fences with regular expressions such as
``r"```[ \\t]*([A-Za-z0-9_+.-]*)[^\\n]*\\n(.*?)```"`` (``re.DOTALL``). On adversarial text — a megabyte of backticks,
or of ```` ``` ```` with no newline — Python's backtracking engine retries the header at every position and takes
quadratic time (minutes per megabyte). :func:`find_fences` returns exactly what ``finditer`` on those patterns returns
(non-overlapping, left to right), with ``str.find`` and one anchored, backtracking-free match per fence: O(n).

Why one left-to-right pass is exact: a match can only start at an occurrence of ```` ``` ````; its header runs to the
first newline after it (``[^\\n]*`` cannot cross one, and the greedy ``[ \\t]*`` and language class are settled by
the first try, since every split ends at the same newline); its content runs to the next ```` ``` ```` after that
newline (lazy ``.*?``), or to the end of the text when unterminated fences are allowed. When the leftmost candidate
fails — no newline after it, or (closed fences only) no later ```` ``` ```` — no later position can match either, so
the scan stops.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from functools import lru_cache
from typing import NamedTuple

__all__ = ["CODE_LANG_CHARS", "COQ_LANG_CHARS", "Fence", "find_fences", "iter_fences"]

#: Characters of a fence's language tag for code (``python``, ``c++``, ``objective-c``, ``v1.2``).
CODE_LANG_CHARS = string.ascii_letters + string.digits + "_+.-"
#: Characters of a fence's language tag for Coq (as :data:`CODE_LANG_CHARS`, without ``.``).
COQ_LANG_CHARS = string.ascii_letters + string.digits + "_+-"

_TICKS = "```"


class Fence(NamedTuple):
    """One fenced block (a named tuple: cheap to build by the hundred thousand).

    Attributes:
        lang: the language tag as written (the regex's group 1; may be ``""``), not lower-cased.
        start, end: bounds of the content (group 2): ``text[start:end]`` is the block's body.
        closed: whether a closing ```` ``` ```` ends it (``False``: it runs to the end of the text).
        match_start, match_end: bounds of the whole fence, opening and closing backticks included.
    """

    lang: str
    start: int
    end: int
    closed: bool
    match_start: int
    match_end: int


@lru_cache(maxsize=8)
def _header_re(lang_chars: str) -> re.Pattern[str]:
    """``[ \\t]*([<lang_chars>]*)``: matched once per fence at a fixed position, so it cannot backtrack far."""
    return re.compile("[ \t]*([" + "".join(re.escape(char) for char in sorted(set(lang_chars))) + "]*)")


def find_fences(text: str, *, lang_chars: str = CODE_LANG_CHARS, allow_unterminated: bool = False) -> list[Fence]:
    """Every fenced block of ``text``, left to right, in O(len(text)) (:func:`iter_fences` as a list).

    Args:
        text: the completion.
        lang_chars: the characters a language tag may hold (:data:`CODE_LANG_CHARS` or :data:`COQ_LANG_CHARS`).
        allow_unterminated: also return a last fence that is never closed (its content runs to the end of the text).

    With the defaults the result equals ``re.finditer(r"```[ \\t]*([A-Za-z0-9_+.-]*)[^\\n]*\\n(.*?)```", text,
    re.DOTALL)``; with ``lang_chars=COQ_LANG_CHARS, allow_unterminated=True`` it equals
    ``re.finditer(r"```[ \\t]*([A-Za-z0-9_+-]*)[^\\n]*\\n(.*?)(?:```|\\Z)", text, re.DOTALL)`` — group 1 is
    ``lang``, group 2 spans ``start:end``, the match spans ``match_start:match_end``.
    """
    return list(iter_fences(text, lang_chars=lang_chars, allow_unterminated=allow_unterminated))


def iter_fences(text: str, *, lang_chars: str = CODE_LANG_CHARS, allow_unterminated: bool = False) -> Iterator[Fence]:
    """:func:`find_fences`, one fence at a time: a caller that keeps only some fences (e.g. the last ``python`` one)
    never holds a hundred thousand of them (a megabyte of ```` ```\\n ````)."""
    header = _header_re(lang_chars)
    position = 0
    while True:
        opening = text.find(_TICKS, position)
        if opening < 0:
            return
        newline = text.find("\n", opening + 3)
        if newline < 0:
            return
        lang = header.match(text, opening + 3, newline).group(1)
        start = newline + 1
        closing = text.find(_TICKS, start)
        if closing >= 0:
            yield Fence(lang, start, closing, True, opening, closing + 3)
            position = closing + 3
            continue
        if allow_unterminated:
            yield Fence(lang, start, len(text), False, opening, len(text))
        return
