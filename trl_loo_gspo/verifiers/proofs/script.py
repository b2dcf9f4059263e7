"""Reading a Coq proof script without running Coq: locating it in a completion, lexing it, screening it.

The completion supplies only a *proof script*: the last fenced ````coq`` block (else the last untagged fence, else
the whole completion) — :func:`extract_proof_script`. :class:`~.coq.CoqVerifier` screens it
with the rules below before any ``coqc`` run (:func:`analyze_coq_script`), and derives the hack-detector flags of its
span signals from the same screening.

**The proof script must be tactics only** (documented, conservative). It is cut into sentences (comments and strings
lexed as Coq does; a ``.`` is taken as a terminator in every place Coq might take it, so the cut errs toward *more*
sentences) and every sentence, after bullets (``-``/``+``/``*``), braces and goal selectors (``2:``, ``all:``),
must start with a lowercase letter, ``(`` or ``[`` — every Coq vernacular command starts with an uppercase letter or
``#[``, so ``Qed``/``Axiom``/``Require``/``Load``/``Redirect``/``Set``/``Drop``/``Declare ML Module`` ... can never
start a sentence. As a second, independent layer, a deny-list of vernacular keywords (``Admitted``, ``Axiom``,
``Theorem``, ``Reset``, ``Load``, ``Require``, ...) and of tactics (``admit``, ``give_up``, ``native_compute``) is
rejected wherever it occurs outside comments and strings. A completion that restates the dataset's preamble and
theorem verbatim (``Theorem add_0_r : ... . Proof. ... Qed.``, the usual format) is accepted: the verbatim restatement
and the ``Proof.``/``Qed.`` delimiters are stripped; a *different* statement is rejected as tampering.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..text import COQ_LANG_CHARS, Fence, iter_fences

__all__ = [
    "HACK_WEIGHTS",
    "ScriptFinding",
    "analyze_coq_script",
    "extract_proof_script",
]


_STATEMENT_KEYWORDS = (
    "Theorem",
    "Lemma",
    "Fact",
    "Remark",
    "Corollary",
    "Proposition",
    "Property",
    "Example",
)
_STATEMENT_RE = re.compile(r"^\s*(?:" + "|".join(_STATEMENT_KEYWORDS) + r")\s+([A-Za-z_][\w']*)(?![\w'])(.*)$", re.S)


_COQ_TAGS = {"coq", "rocq", "v", "gallina"}


def extract_proof_script(completion: str) -> str:
    """The last ````coq`` fenced block (also ``rocq``/``v``), else the last untagged one, else the whole text."""
    return _locate_proof_script(completion)[0]


def _locate_proof_script(completion: str) -> tuple[str, int]:
    """:func:`extract_proof_script` and where it starts: ``completion[offset : offset + len(script)] == script``.

    Fences are read by :func:`~trl_loo_gspo.verifiers.text.iter_fences` (linear time; a last fence may be
    unterminated, e.g. a truncated completion).
    """
    last_coq: Fence | None = None
    last_untagged: Fence | None = None
    for fence in iter_fences(completion, lang_chars=COQ_LANG_CHARS, allow_unterminated=True):
        if fence.lang.lower() in _COQ_TAGS:
            last_coq = fence
        elif fence.lang == "":
            last_untagged = fence
    fence = last_coq or last_untagged
    if fence is None:
        return completion.strip(), len(completion) - len(completion.lstrip())
    body = completion[fence.start : fence.end]
    return body.strip(), fence.start + len(body) - len(body.lstrip())


@dataclass(slots=True)
class _Sentence:
    code: str  # comments removed, string contents replaced by ""
    start: int
    end: int
    strings: list[str]
    terminated: bool = True


def _skip_string(src: str, i: int) -> int:
    """Index after the Coq string starting at ``src[i] == '"'`` (``""`` escapes a quote); -1 if unterminated."""
    j = i + 1
    while True:
        k = src.find('"', j)
        if k < 0:
            return -1
        if src.startswith('""', k):
            j = k + 2
            continue
        return k + 1


#: What the comment skipper stops at: a nested opener, a closer, a string (``(*`` is tried before ``*)``, as Coq
#: does, so ``(*)`` opens a comment).
_COMMENT_TOKEN = re.compile(r'\(\*|\*\)|"')
#: What the sentence lexer stops at: a comment, a string, a ``.`` that ends a sentence — one not followed by an
#: identifier character (``\w``: ``str.isalnum()`` or ``_``), ``'`` or another ``.``; everything between is code.
_LEX_TOKEN = re.compile(r'\(\*|"|\.(?![\w.\'])')


def _skip_comment(src: str, i: int, end: int) -> int:
    """Index just after the (nested) comment opening at ``src[i:i+2] == "(*"``, strings inside it skipped as Coq
    does; ``-1`` when the comment or a string in it is not closed before ``end``. Linear: it jumps from token to
    token (:data:`_COMMENT_TOKEN`) and never rescans."""
    depth, i = 1, i + 2
    while depth:
        match = _COMMENT_TOKEN.search(src, i, end)
        if match is None:
            return -1
        token = match.group()
        if token == '"':
            i = _skip_string(src, match.start())
            if i < 0 or i >= end:
                return -1
            continue
        depth += 1 if token == "(*" else -1
        i = match.end()
    return i


def _lex_sentences(src: str) -> list[_Sentence]:
    """Cut a Coq script into sentences; ``ValueError`` on an unterminated comment or string.

    A ``.`` ends a sentence unless it is followed by an identifier character or another ``.`` — Coq needs a blank
    or the end of input, so this cuts at least wherever Coq does (more sentences, never fewer). Linear time: the
    lexer jumps from one comment, string or ``.`` to the next (:data:`_LEX_TOKEN`).
    """
    sentences: list[_Sentence] = []
    code: list[str] = []
    strings: list[str] = []
    start = i = 0
    n = len(src)
    while i < n:
        match = _LEX_TOKEN.search(src, i)
        if match is None:
            code.append(src[i:])
            break
        at = match.start()
        code.append(src[i:at])
        token = match.group()
        if token == "(*":
            i = _skip_comment(src, at, n)
            if i < 0:
                raise ValueError("unterminated comment (or a string inside it)")
            code.append(" ")
        elif token == '"':
            i = _skip_string(src, at)
            if i < 0:
                raise ValueError("unterminated string")
            strings.append(src[at + 1 : i - 1].replace('""', '"'))
            code.append('""')
        else:
            sentences.append(_Sentence("".join(code).strip(), start, at + 1, strings))
            code, strings = [], []
            i = start = at + 1
    rest = "".join(code).strip()
    if rest or strings:
        sentences.append(_Sentence(rest, start, n, strings, terminated=False))
    return sentences


def _strip_comments(src: str) -> str:
    try:
        return " ".join(s.code + ("." if s.terminated else "") for s in _lex_sentences(src))
    except ValueError:
        return src


_SELECTOR = r"(?:\d+(?:\s*-\s*\d+)?(?:\s*,\s*\d+(?:\s*-\s*\d+)?)*|all|par|!|\[\s*[A-Za-z_][\w']*\s*\])\s*:(?!=)"
#: Leading bullets (``-``/``+``/``*`` runs), braces and goal selectors, each followed by blanks, as one match: nothing
#: follows the repetition, so the engine takes the first (greedy) way and never backtracks into earlier items.
_HEAD_PREFIX_RE = re.compile(r"(?:(?:[-+*]+|[{}]|" + _SELECTOR + r")\s*)*")
_IDENT_RE = re.compile(r"[A-Za-z_\u00c0-\uffff][\w'\u00c0-\uffff]*")

#: Words rejected anywhere outside comments and strings, by P_hack category.
_DENIED_WORDS: dict[str, tuple[str, ...]] = {
    "placeholder": ("Admitted", "admit", "give_up", "Abort", "Admit"),
    "new_axiom": (
        "Axiom",
        "Axioms",
        "Parameter",
        "Parameters",
        "Hypothesis",
        "Hypotheses",
        "Variable",
        "Variables",
        "Conjecture",
        "Context",
    ),
    "statement_tampering": (
        *_STATEMENT_KEYWORDS,
        "Goal",
        "Definition",
        "Fixpoint",
        "CoFixpoint",
        "Inductive",
        "CoInductive",
        "Instance",
        "Let",
        "Qed",
        "Defined",
        "Save",
        "Proof",
        "Reset",
        "Back",
        "BackTo",
        "Undo",
        "Restart",
        "Module",
        "Section",
        "End",
        "Notation",
        "Infix",
        "Ltac",
        "Ltac2",
        "Obligation",
        "Unset",
        "Local",
        "Global",
        "Opaque",
        "Transparent",
        "Hint",
        "Arguments",
        "Canonical",
        "Coercion",
        "Import",
        "Export",
        "Include",
        "Register",
        "Primitive",
    ),
    "escape": (
        "Load",
        "Require",
        "Declare",
        "Redirect",
        "Cd",
        "Drop",
        "Extract",
        "Extraction",
        "Time",
        "Timeout",
        "Fail",
        "Succeed",
        "Add",
        "Quit",
        "external",
        "native_compute",
        "native_cast_no_check",
    ),
}
_WORD_CATEGORY = {word: category for category, words in _DENIED_WORDS.items() for word in words}
#: Tactics that skip type checking until Qed (the kernel still checks them): suspicious, not rejected.
_NO_CHECK_TACTICS = ("exact_no_check", "vm_cast_no_check", "change_no_check")
_SPOOF_MARKERS = ("closed under the global context", "axioms:")
#: P_hack weight of each finding category.
HACK_WEIGHTS = {
    "placeholder": 1.0,
    "new_axiom": 1.0,
    "statement_tampering": 1.0,
    "escape": 1.0,
    "output_spoofing": 0.8,
    "kernel_bypass": 0.5,
    "vernacular": 0.3,
}


@dataclass
class ScriptFinding:
    """One suspicious construct in a proof script. ``reject`` findings make the verifier score 0."""

    rule: str
    category: str
    excerpt: str
    reject: bool = True


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().rstrip(".").strip()


def _sentence_head(code: str) -> str:
    """The sentence with leading bullets, braces and goal selectors removed (one regex match: linear time)."""
    text = code.strip()
    return text[_HEAD_PREFIX_RE.match(text).end() :]


def analyze_coq_script(script: str, theorem: str, preamble: str = "") -> tuple[str, list[ScriptFinding]]:
    """Screen a proof script: return the script to check (restatement and delimiters stripped) and the findings.

    A leading verbatim copy of preamble sentences and of the statement, a leading ``Proof.`` (also ``Proof using
    ...``/``Proof with ...``) and a trailing ``Qed.``/``Defined.`` are stripped. Every remaining sentence must be a
    tactic (see the module docstring); deny-listed words are rejected anywhere outside comments and strings.
    """
    screening = _screen_coq_script(script, theorem, preamble)
    return screening.body, screening.findings


@dataclass
class _Screening:
    """:func:`analyze_coq_script` with its sentences: the kept (tactic) sentences of the script and their findings."""

    body: str
    findings: list[ScriptFinding]
    sentences: list[_Sentence] = field(default_factory=list)
    per_sentence: list[list[ScriptFinding]] = field(default_factory=list)
    lexed: bool = True


def _screen_coq_script(script: str, theorem: str, preamble: str = "") -> _Screening:
    try:
        sentences = _lex_sentences(script)
    except ValueError as err:
        return _Screening(script, [ScriptFinding("unlexable", "vernacular", str(err))], lexed=False)
    findings: list[ScriptFinding] = []
    preamble_sentences: set[str] = set()
    try:
        preamble_sentences = {_normalize(s.code) for s in _lex_sentences(preamble)}
    except ValueError:
        pass
    wanted = _STATEMENT_RE.match(_strip_comments(theorem))
    first, last = 0, len(sentences)  # the kept sentences: sentences[first:last]
    while first < last and sentences[first].code and _normalize(sentences[first].code) in preamble_sentences:
        first += 1
    if first < last:
        restated = _STATEMENT_RE.match(sentences[first].code)
        if restated is not None:
            same = wanted is not None and (restated.group(1), _normalize(restated.group(2))) == (
                wanted.group(1),
                _normalize(wanted.group(2)),
            )
            if not same:
                findings.append(
                    ScriptFinding("statement_mismatch", "statement_tampering", sentences[first].code[:200])
                )
            first += 1
    if first < last and re.fullmatch(r"Proof(?:\s+(?:using|with)\b.*)?", sentences[first].code, re.S):
        first += 1
    if first < last and sentences[last - 1].code in ("Qed", "Defined"):
        last -= 1
    keep = sentences[first:last]
    per_sentence: list[list[ScriptFinding]] = []
    for sentence in keep:
        own: list[ScriptFinding] = []
        head = _sentence_head(sentence.code)
        if head and not (head[0].islower() and head[0].isascii() or head[0] in "(["):
            word = _IDENT_RE.match(head)
            token = word.group(0) if word else head[:20]
            category = _WORD_CATEGORY.get(token, "vernacular")
            own.append(ScriptFinding(f"not_a_tactic:{token}", category, sentence.code[:200]))
        for word in _IDENT_RE.findall(sentence.code):
            if word in _WORD_CATEGORY:
                own.append(ScriptFinding(f"forbidden_word:{word}", _WORD_CATEGORY[word], sentence.code[:200]))
            elif word in _NO_CHECK_TACTICS:
                own.append(ScriptFinding(f"no_check:{word}", "kernel_bypass", sentence.code[:200], False))
        for string in sentence.strings:
            if any(marker in string.lower() for marker in _SPOOF_MARKERS):
                own.append(ScriptFinding("output_spoofing", "output_spoofing", string[:200], False))
        findings.extend(own)
        per_sentence.append(own)
    body = script[keep[0].start : keep[-1].end] if keep else ""
    return _Screening(body.strip(), findings, keep, per_sentence)


def _code_start(src: str, start: int, end: int) -> int:
    """The first position in ``src[start:end]`` that is neither blank nor inside a comment (``end`` if none)."""
    i = start
    while i < end:
        if src[i].isspace():
            i += 1
        elif src.startswith("(*", i):
            j = _skip_comment(src, i, end)
            i = end if j < 0 else j
        else:
            break
    return min(i, end)


#: Span flag of each finding category (method §6 hack detectors on the span signal).
_SPAN_FLAG = {
    "placeholder": "unsound",
    "kernel_bypass": "unsound",
    "new_axiom": "new_hypothesis",
}
#: Tactics that add a hypothesis whose proof is a separate goal (``assert``/``cut``-then-``admit``).
_HYPOTHESIS_TACTICS = frozenset({"assert", "eassert", "enough", "eenough", "cut", "have", "suff"})
#: Rejections that still leave a script safe to run for the goal trace (ordinary tactics, just unsound).
_RUNNABLE_REJECTIONS = frozenset({"forbidden_word:admit", "forbidden_word:give_up"})


def _span_flags(screening: _Screening, rejected: bool, disallowed: Sequence[str]) -> list[tuple[str, ...]]:
    """The hack-detector flags of each kept sentence ("Span signals" in the :mod:`.coq` module docstring)."""
    last_placeholder = max(
        (k for k, own in enumerate(screening.per_sentence) if any(f.category == "placeholder" for f in own)),
        default=-1,
    )
    axioms = {axiom.rsplit(".", 1)[-1] for axiom in disallowed}
    result: list[tuple[str, ...]] = []
    for k, (sentence, own) in enumerate(zip(screening.sentences, screening.per_sentence, strict=True)):
        flags = ["rejected"] if rejected else []
        flags += [_SPAN_FLAG.get(f.category, f.category) for f in own]
        head = _IDENT_RE.match(_sentence_head(sentence.code))
        if head and head.group(0) in _HYPOTHESIS_TACTICS and k <= last_placeholder:
            flags.append("new_hypothesis")
        if axioms and axioms & set(_IDENT_RE.findall(sentence.code)):
            flags.append("disallowed_axiom")
        result.append(tuple(dict.fromkeys(flags)))
    return result
