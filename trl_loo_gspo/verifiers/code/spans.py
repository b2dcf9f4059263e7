"""Span signals of :class:`.CodeVerifier` (method §6): the code block and each tested function, with their hack
flags; the rules are in the :mod:`.verifier` module docstring ("Span signals")."""

from __future__ import annotations

import ast
import re
from typing import Any

from ..base import SpanSignal
from .hacks import EXIT_CALLS, call_name, hardcoded_output, string_literals, tree_signals

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
#: Attempts that flag every function span, wherever in the program they occur: a patch, a forged equality or a
#: frame walk is an attempt of the whole program, not of the function that happens to hold it.
_GLOBAL_SIGNALS = frozenset({"harness", "always_equal", "frame_access", "mock_any", "unanalysable"})
_NOT_LITERAL = object()
_LINE_REST = re.compile(r"[ \t;]*#[^\r\n]*")


def code_spans(
    code: str, offset: int, details: dict[str, Any], tests: list[str], io_cases: list[dict[str, Any]]
) -> list[SpanSignal]:
    """The span signals of one verified program (the rules are in the module docstring, "Span signals").

    Args:
        code: the extracted program, ``completion[offset:offset + len(code)]``.
        offset: where ``code`` starts in the completion text; every span is shifted by it.
        details: the ``details`` of the program's :class:`VerifierResult` (``compiles``, ``checks``, ``tests_run``).
        tests, io_cases: the row's columns.
    """
    if not code.strip():
        return []
    tree = None
    if details.get("compiles"):
        try:
            tree = _strip_docstrings(ast.parse(code))
        except (SyntaxError, ValueError):  # compile() accepted it, so this should not happen
            tree = None
    checks = details.get("checks")  # absent when the run was unscorable or the code did not compile
    test_ok = {c["index"]: c["reason"] == "passed" for c in checks or () if c["kind"] == "test"}
    flags: set[str] = set()
    if tree is not None:
        flags |= tree_signals(tree)
        if hardcoded_output(string_literals(tree), io_cases):
            flags.add("hardcoded_output")
    meta: dict[str, Any] = {}
    if test_ok:
        meta.update(tests_passed=sum(test_ok.values()), tests_total=len(test_ok))
    io_checks = [c for c in checks or () if c["kind"] == "io"]
    if io_checks:
        io_passed = sum(c["passed"] for c in io_checks)
        meta.update(io_passed=io_passed, io_total=len(io_checks), io_fraction=io_passed / len(io_checks))
        meta["io_skipped"] = sum(c["reason"] == "skipped" for c in io_checks)
    block_value = 1.0 if tree is not None and not flags else 0.0
    spans = [
        SpanSignal(offset, offset + len(code), block_value, "code_block", "code_block", tuple(sorted(flags)), meta)
    ]
    if tree is None or not test_ok:
        return spans

    test_trees = [_parse_or_none(test) for test in tests]
    refs = [_test_refs(t) if t is not None else (set(), set()) for t in test_trees]
    module_level = [s for s in tree.body if not isinstance(s, (*_FUNCTION_TYPES, ast.ClassDef))]
    shared = (flags & _GLOBAL_SIGNALS) | tree_signals(ast.Module(body=module_level, type_ignores=[]))
    line_starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", code)]
    for qualname, node in _defined_functions(tree).items():
        owner, _, name = qualname.rpartition(".")
        targeted = [
            i
            for i, (names, attrs) in enumerate(refs)
            if i in test_ok and ((owner in names and name in attrs) if owner else name in names)
        ]
        if not targeted:
            continue  # no test exercises it: no signal, which is not a zero signal
        passed = [i for i in targeted if test_ok[i]]
        own = shared | tree_signals(ast.Module(body=[node], type_ignores=[])) | _exit_calls(node)
        pairs = [p for i in passed if test_trees[i] is not None for p in _literal_calls(test_trees[i], name)]
        if pairs and all(_special_cased(node, args, want) for args, want in pairs):
            own.add("hardcoded")
        first = node.decorator_list[0] if node.decorator_list else node
        start = _char_offset(code, line_starts, first.lineno, first.col_offset)
        if node.decorator_list:
            start = code.rfind("@", 0, start)
        end = _char_offset(code, line_starts, node.end_lineno or node.lineno, node.end_col_offset or 0)
        rest = _LINE_REST.match(code, end)  # a trailing comment on the last line belongs to the function
        end = rest.end() if rest else end
        spans.append(
            SpanSignal(
                offset + start,
                offset + end,
                0.0 if own else len(passed) / len(targeted),
                "function",
                f"function:{qualname}",
                tuple(sorted(own)),
                {"tests": targeted, "passed": len(passed), "targeted": len(targeted)},
            )
        )
    return spans


def _parse_or_none(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _strip_docstrings(tree: ast.Module) -> ast.Module:
    """Drop docstrings (in place), so that prose such as "tests whether ..." is not read as a hack signal."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, *_FUNCTION_TYPES)) and ast.get_docstring(node, False):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def _defined_functions(tree: ast.Module) -> dict[str, _FunctionNode]:
    """Top-level functions (``name``) and methods of top-level classes (``Class.name``); the last definition wins."""
    found: dict[str, _FunctionNode] = {}
    for stmt in tree.body:
        if isinstance(stmt, _FUNCTION_TYPES):
            found.pop(stmt.name, None)
            found[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            for key in [k for k in found if k.startswith(f"{stmt.name}.")]:
                del found[key]
            for item in stmt.body:
                if isinstance(item, _FUNCTION_TYPES):
                    found.pop(f"{stmt.name}.{item.name}", None)
                    found[f"{stmt.name}.{item.name}"] = item
    return found


def _test_refs(test: ast.Module) -> tuple[set[str], set[str]]:
    """(names the test reads and does not bind at its own top level, attribute names it uses).

    ``check(add)`` after ``def check(candidate): ...`` reads ``add`` (HumanEval's entry point) but not ``check``.
    """
    bound: set[str] = set()
    for stmt in test.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    attrs = {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
    return names - bound, attrs


def _exit_calls(node: ast.AST) -> set[str]:
    """``{"early_exit"}`` when ``node`` calls ``sys.exit``/``os._exit``/``os.kill``/... anywhere."""
    calls = (n for n in ast.walk(node) if isinstance(n, ast.Call))
    return {"early_exit"} if any(call_name(c) in EXIT_CALLS for c in calls) else set()


def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else _NOT_LITERAL
    except Exception:  # ValueError, TypeError, SyntaxError, MemoryError, RecursionError
        return _NOT_LITERAL


def _literal_calls(test: ast.Module, name: str) -> list[tuple[tuple[Any, ...], Any]]:
    """``(args, expected)`` of every ``name(<literals>) == <literal>`` in the test (also ``candidate(...)``,
    HumanEval's parameter, and ``obj.name(...)``)."""
    pairs = []
    for node in ast.walk(test):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
            continue
        for call, other in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
            if not isinstance(call, ast.Call) or call.keywords or not call.args:
                continue
            func = call.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called not in (name, "candidate"):
                continue
            args, want = tuple(_literal(a) for a in call.args), _literal(other)
            if want is not _NOT_LITERAL and _NOT_LITERAL not in args:
                pairs.append((args, want))
    return pairs


def _special_cased(fn: _FunctionNode, args: tuple[Any, ...], want: Any) -> bool:
    """Whether ``fn`` answers ``args`` with the literal ``want`` by special-casing the input: an ``if``/conditional
    expression comparing (``==``) to the literal argument(s) that returns the literal ``want``, or a dict literal
    mapping the argument(s) to ``want``. Literals are compared by ``repr`` (so ``1`` is not ``True``)."""
    want_repr = repr(want)

    def covers(inputs: list[str]) -> bool:
        return repr(args) in inputs or all(repr(a) in inputs for a in args)

    for node in ast.walk(fn):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                key_value, got = _literal(key), _literal(value)
                if got is not _NOT_LITERAL and repr(got) == want_repr and key_value is not _NOT_LITERAL:
                    if covers([repr(key_value)]):
                        return True
        elif isinstance(node, (ast.If, ast.IfExp)):
            outs = (
                [s.value for s in node.body if isinstance(s, ast.Return)] if isinstance(node, ast.If) else [node.body]
            )
            if not any(repr(got) == want_repr for got in map(_literal, outs) if got is not _NOT_LITERAL):
                continue
            inputs = [
                repr(value)
                for cmp in ast.walk(node.test)
                if isinstance(cmp, ast.Compare) and all(isinstance(op, ast.Eq) for op in cmp.ops)
                for value in map(_literal, [cmp.left, *cmp.comparators])
                if value is not _NOT_LITERAL
            ]
            if covers(inputs):
                return True
    return False


def _char_offset(code: str, line_starts: list[int], lineno: int, col_bytes: int) -> int:
    """The character offset of an AST position (1-based line, column in UTF-8 bytes) in ``code``."""
    start = line_starts[lineno - 1]
    return start + len(code[start : start + col_bytes].encode("utf-8")[:col_bytes].decode("utf-8", "ignore"))
