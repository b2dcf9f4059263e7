"""What the detectors of one analysis share (:class:`ScanContext`): the tree, the program text, the row's io cases,
and facts computed once on first use — nodes by type, docstrings, functions, module aliases and dynamic attribute
access."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from .helpers import (
    CHAIN_LIMIT,
    DUNDER_ATTR_CALLS,
    KNOWN_MODULES,
    TAMPER_MODULES,
    call_name,
    index_nodes,
    str_constant,
)

__all__ = ["IMPORT_CALLS", "ScanContext", "first_argument", "import_call"]

#: Calls whose literal first argument names a module that is then imported or run.
IMPORT_CALLS = ("__import__", "import_module", "reload", "find_spec", "run_module", "run_path")


class ScanContext:
    """One program (or one piece of it) under analysis.

    Args:
        tree: the parsed program (``None`` when it does not parse; any other object is analysed as an empty tree).
        source: the program text, when known (source-level detectors need it).
        io_cases: the row's io cases (``hardcoded_output`` reads them).

    The facts are computed on first use; when the tree is too large or malformed to analyse, reading them raises
    (every time), and each detector that reads them reports ``unanalysable``.
    """

    def __init__(
        self,
        tree: Any,
        source: str | None = None,
        *,
        io_cases: list[dict[str, Any]] | None = None,
    ) -> None:
        self.tree, self.source, self.io_cases = tree, source, io_cases
        self._memo: dict[str, Any] = {}
        self._failure: BaseException | None = None

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per context (a failure is not remembered: it raises again)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    # -- nodes and program facts -------------------------------------------------------------------------------

    def nodes(self, *types: type) -> list[Any]:
        """Every node of the given types, grouped by type in argument order."""
        by_type = self._facts()["by_type"]
        return [n for t in types for n in by_type.get(t, ())]

    @property
    def docstrings(self) -> set[int]:
        """Ids of the docstring constants (module, class and function docstrings)."""
        return self._facts()["docstrings"]

    @property
    def functions(self) -> dict[str, ast.AST]:
        """Functions by name: ``def`` anywhere and ``name = lambda ...`` (the last one found wins)."""
        return self._facts()["functions"]

    @property
    def modules(self) -> dict[str, str]:
        """Names bound to modules (imports and aliases) -> the dotted module path."""
        return self._facts()["modules"]

    @property
    def imported(self) -> set[str]:
        """Names whose attributes must not be written (tampering): imported modules and their aliases."""
        return self._facts()["imported"]

    def _facts(self) -> dict[str, Any]:
        if self._failure is not None:
            raise self._failure
        if "facts" not in self._memo:
            try:
                self._memo["facts"] = self._compute_facts()
            except Exception as err:  # Unanalysable, RecursionError, MemoryError, a malformed node
                self._failure = err
                raise
        return self._memo["facts"]

    def _compute_facts(self) -> dict[str, Any]:
        by_type = index_nodes(self.tree)
        facts: dict[str, Any] = {"by_type": by_type, "docstrings": set(), "functions": {}}
        facts.update(modules={name: name for name in KNOWN_MODULES}, imported=set(TAMPER_MODULES))

        def get(*types: type) -> list[Any]:
            return [n for t in types for n in by_type.get(t, ())]

        for node in get(ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef):
            body = getattr(node, "body", None) or []
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    facts["docstrings"].add(id(first.value))
        for node in get(ast.FunctionDef, ast.AsyncFunctionDef):
            facts["functions"][node.name] = node
        assigns = get(ast.Assign)
        for node in assigns:
            target = node.targets[0] if len(node.targets) == 1 else None
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Lambda):
                facts["functions"][target.id] = node.value
        for node in get(ast.Import, ast.ImportFrom):
            self._bind_import(node, facts)
        self._bind_aliases(assigns, facts)
        return facts

    @staticmethod
    def _bind_import(node: ast.Import | ast.ImportFrom, facts: dict[str, Any]) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                facts["modules"][bound] = alias.name if alias.asname else bound
                facts["imported"].add(bound)
            return
        if node.level:
            return
        for alias in node.names:
            if alias.name != "*":
                facts["modules"][alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"

    def _bind_aliases(self, assigns: list[ast.Assign], facts: dict[str, Any]) -> None:
        """``m = sys``, ``d = builtins.__dict__``: aliases of modules (and aliases of aliases, two rounds)."""
        candidates = [
            node
            for node in assigns
            if len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
        ]
        modules = facts["modules"]
        for _ in range(2):
            known = len(modules)
            for node in candidates:
                name = node.targets[0].id
                module = self._resolve_with(modules, node.value)
                if module is not None:
                    modules[name] = module
                    facts["imported"].add(name)
            if len(modules) == known:
                break

    # -- resolving expressions ---------------------------------------------------------------------------------

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted module path an expression stands for (``sys``, ``os.path``, ``builtins.__dict__``), if any."""
        return self._resolve_with(self.modules, node)

    def _resolve_with(self, modules: dict[str, str], node: ast.AST, depth: int = 0) -> str | None:
        attrs: list[str] = []
        for _ in range(CHAIN_LIMIT):
            if not isinstance(node, ast.Attribute):
                break
            attrs.append(node.attr)
            node = node.value
        else:
            return None
        base: str | None = None
        if isinstance(node, ast.Name):
            base = modules.get(node.id)
        elif isinstance(node, ast.Call):
            base = import_call(node)
            if base is None and call_name(node) == "vars" and len(node.args) == 1 and depth < 4:
                inner = self._resolve_with(modules, node.args[0], depth + 1)
                base = f"{inner}.__dict__" if inner else None
        elif isinstance(node, ast.Subscript) and depth < 4:
            if self._resolve_with(modules, node.value, depth + 1) == "sys.modules":
                key = node.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    base = key.value
                elif isinstance(key, ast.Name) and key.id == "__name__":
                    base = "__main__"
        if base is None:
            return None
        return ".".join([base, *reversed(attrs)])

    def tampered_module(self, container: ast.AST) -> str | None:
        """The module whose namespace writing into ``container`` (an attribute's or item's owner) changes."""
        for _ in range(CHAIN_LIMIT):
            module = self.resolve(container)
            if module is not None:
                root = _root_name(container)
                top = module.split(".")[0]
                if top in TAMPER_MODULES or top == "__main__" or root in self.imported or root is None:
                    return module
                return None
            if isinstance(container, (ast.Attribute, ast.Subscript)):
                container = container.value
            else:
                return None
        return None

    # -- facts several families read ---------------------------------------------------------------------------

    def named_modules(self) -> list[str]:
        """Modules the program imports or names literally to an import call (``__import__("m")``,
        ``importlib.import_module("m")``, ``runpy.run_module("m")``, ...); relative imports excepted."""
        return self.cached("named_modules", self._named_modules)

    def _named_modules(self) -> list[str]:
        names: list[str] = []
        for node in self.nodes(ast.Import, ast.ImportFrom):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif not node.level:
                module = node.module or ""
                names.append(module)
                names += [f"{module}.{alias.name}" for alias in node.names if alias.name != "*"]
        for node in self.nodes(ast.Call):
            literal = str_constant(first_argument(node))
            if call_name(node) in IMPORT_CALLS and call_name(node) != "reload" and literal is not None:
                names.append(literal)
        return names

    def from_imports(self) -> list[tuple[str, str]]:
        """``(module, name)`` of every ``from module import name`` (absolute, not ``*``)."""
        return [
            (node.module or "", alias.name)
            for node in self.nodes(ast.ImportFrom)
            if not node.level
            for alias in node.names
            if alias.name != "*"
        ]

    def dynamic_attributes(self) -> list[tuple[str, list[ast.AST]]]:
        """``(function, [owner, name, value...])`` of every ``getattr``/``setattr``/``delattr``/``hasattr`` call
        and every ``x.__setattr__("a", v)``/``object.__setattr__(x, "a", v)`` (and ``__delattr__``,
        ``__getattribute__``), with the function those stand for."""
        return self.cached("dynamic_attributes", self._dynamic_attributes)

    def _dynamic_attributes(self) -> list[tuple[str, list[ast.AST]]]:
        found: list[tuple[str, list[ast.AST]]] = []
        for node in self.nodes(ast.Call):
            name, func, args = call_name(node), node.func, node.args
            if name in ("getattr", "setattr", "delattr", "hasattr") and isinstance(func, ast.Name) and len(args) >= 2:
                found.append((name, args))
            elif name in DUNDER_ATTR_CALLS and isinstance(func, ast.Attribute) and args:
                if isinstance(args[0], ast.Constant) and isinstance(
                    args[0].value, str
                ):  # bound: x.__setattr__("a", v)
                    found.append((DUNDER_ATTR_CALLS[name], [func.value, *args]))
                elif len(args) >= 2:  # unbound: object.__setattr__(x, "a", v)
                    found.append((DUNDER_ATTR_CALLS[name], args))
        return found


def first_argument(node: ast.Call) -> ast.AST | None:
    """The first positional argument of a call, else its ``source=``/``name=`` keyword's value."""
    if node.args:
        return node.args[0]
    return next((k.value for k in node.keywords if k.arg in ("source", "name")), None)


def import_call(node: ast.Call) -> str | None:
    """The module an ``__import__("m")``/``import_module("m")`` call returns (literal names only)."""
    name = call_name(node)
    if name not in ("__import__", "import_module") or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    fromlist = len(node.args) >= 4 or any(k.arg == "fromlist" for k in node.keywords)
    return first.value if name == "import_module" or fromlist else first.value.split(".")[0]


def _root_name(node: ast.AST) -> str | None:
    for _ in range(CHAIN_LIMIT):
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        else:
            break
    return node.id if isinstance(node, ast.Name) else None
