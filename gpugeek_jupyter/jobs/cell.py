"""Shipping a notebook cell to the ranks.

The cell is parsed here; the names it reads that the notebook defines (functions, classes and
variables from earlier cells) are fingerprinted now and travel, when the ranks lack them
(:mod:`.names`: the namespace rule), as one cloudpickle, so shared objects stay shared; modules
travel as their name and are imported again on each worker. Names the cell binds before it reads
them are not shipped. A name that cannot be pickled is an error that names it, unless the cell
mentions it only in code that never runs (``if False:``, ``while 0:``): then it is left out, with a
notice (:attr:`CellProgram.notices`).

>>> program = prepare_cell("y = x + 1\\ny", {"x": 41})
>>> sorted(program.shipped), program.has_value
(['x'], True)
"""

from __future__ import annotations

import ast
import functools
import hashlib
import linecache
import types
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError
from .names import CellNames
from .payload import CellCode

# Names every rank's cell gets without shipping them.
RANK_NAMES = frozenset({"rank", "world_size", "device", "dist", "gg", "get_ipython", "display"})
CELL_FILENAME = "<gpugeek_run cell>"


@dataclass(frozen=True)
class CellProgram:
    bare: CellCode  # without the names' values: the pool's agent adds those the ranks lack
    names: CellNames
    shipped: tuple[str, ...]  # pickled names
    modules: tuple[str, ...]  # names imported again on the workers
    sha256: str
    notices: tuple[str, ...] = ()  # what the caller is told (a name left out)

    @property
    def has_value(self) -> bool:
        return self.bare.has_value

    @property
    def code(self) -> CellCode:
        """The code with every name's value in it (for a process that holds nothing of this one's)."""
        return self.names.sealed(self.bare)


def prepare_cell(
    source: str,
    namespace: Mapping[str, Any],
    hidden: Collection[str] = (),
    rank0_only: bool = False,
    ipython: str = "",
) -> CellProgram:
    """Parse ``source`` and fingerprint what it needs from ``namespace``; SpecError naming any bad name.
    ``ipython``: what runs the cell's magics on the ranks (:attr:`CellCode.ipython`); without it,
    ``source`` is plain Python."""
    names, has_value, dead_only = _analyse(source, bool(ipython))
    needed = [n for n in names if n in namespace and n not in RANK_NAMES and n not in hidden]
    imports: list[tuple[str, str]] = []
    values: dict[str, Any] = {}
    for name in needed:
        value = namespace[name]
        if isinstance(value, types.ModuleType) and value.__name__ != "__main__":
            imports.append((name, value.__name__))
        else:
            values[name] = value
    notices: list[str] = []
    try:
        cell_names = CellNames.of(values, on_error=lambda e: _unshippable(values, e))
    except SpecError:
        # a name only dead code mentions is not worth refusing the cell for: leave it out, and say so
        skipped = [name for name in values if name in dead_only and not _pickles(values[name])]
        if not skipped:
            raise
        for name in skipped:
            notices.append(
                f"{name!r} (a {type(values.pop(name)).__name__}) cannot be pickled and is read only in code "
                f"that never runs (such as `if False:`), so it was not sent to the workers"
            )
        cell_names = CellNames.of(values, on_error=lambda e: _unshippable(values, e))
    code = CellCode(
        source=source,
        filename=CELL_FILENAME,
        names_blob=b"",
        imports=tuple(imports),
        sources=_sources_of(values.values()),
        has_value=has_value,
        rank0_only=rank0_only,
        ipython=ipython,
    )
    return CellProgram(
        bare=code,
        names=cell_names,
        shipped=tuple(values),
        modules=tuple(name for name, _ in imports),
        sha256=hashlib.sha256(source.encode()).hexdigest(),
        notices=tuple(notices),
    )


def check_names(values: Mapping[str, Any], what: str) -> list[str]:
    """The names of ``values``, each a variable name that is not one the ranks set themselves
    (``rank``, ``dist``, ...); else a :class:`SpecError` naming the first bad one."""
    import keyword

    if not values:
        raise SpecError(field="names", value="", rule=f"at least one variable name to {what}", example="model")
    for name in values:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise SpecError(field="names", value=name, rule="variable names", example="model")
        if name in RANK_NAMES:
            raise SpecError(
                field="names",
                value=name,
                rule=f"a name of yours, not one each rank sets ({', '.join(sorted(RANK_NAMES))})",
                example="model",
            )
    return list(values)


@functools.lru_cache(maxsize=64)
def _analyse(source: str, magics_run: bool = False) -> tuple[tuple[str, ...], bool, frozenset[str]]:
    """The cell's free names, whether it ends with an expression, and the free names only code that
    never runs reads (cached: cells are re-run). ``magics_run``: the source came through IPython's
    transformations (its magics are calls by then), so a syntax error is the cell's own."""
    try:
        tree = ast.parse(source, filename=CELL_FILENAME)
    except SyntaxError as e:
        where = f"the cell does not parse: {e.msg} at line {e.lineno} ({(e.text or '').strip()!r})"
        raise SpecError(
            where
            if magics_run
            else f"{where}; run_cell() takes plain Python (%magics and !commands run in %%gpugeek_run cells)",
            field="cell",
        ) from e
    has_value = bool(tree.body) and isinstance(tree.body[-1], ast.Expr)
    if magics_run and "_magic(" in source:
        tree = _MagicsCode().visit(tree)
    names = free_names(tree)
    live = free_names(_WithoutDeadCode().visit(tree))
    return tuple(names), has_value, frozenset(names) - set(live)


# IPython's magics that run code of the cell's: (line magic, the options that take a value)
_CODE_MAGICS = {"time": "", "timeit": "nrp", "prun": "dlrsTD"}


class _MagicsCode(ast.NodeTransformer):
    """The tree with each ``%time``/``%timeit``/``%prun`` line, and ``%%time``/``%%timeit`` cell,
    replaced by the code it runs (as IPython transformed it: ``get_ipython().run_line_magic('time',
    'f(x)')``), so that the notebook names that code reads are sent too, in the cell's order."""

    def visit_Expr(self, node: ast.Expr) -> Any:
        code = _magic_code(node.value)
        return node if code is None else code.body

    def visit_Assign(self, node: ast.Assign) -> Any:  # x = %time f(y)
        code = _magic_code(node.value)
        if code is not None and len(code.body) == 1 and isinstance(code.body[0], ast.Expr):
            node.value = code.body[0].value
        return node


def _magic_code(call: ast.expr) -> ast.Module | None:
    """The code a ``get_ipython().run_line_magic``/``run_cell_magic`` call of a code magic runs."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return None
    strings = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if len(strings) != len(call.args) or not strings or strings[0] not in _CODE_MAGICS:
        return None
    if call.func.attr == "run_line_magic" and len(strings) == 2:
        code = _without_options(strings[1], _CODE_MAGICS[strings[0]])
    elif call.func.attr == "run_cell_magic" and len(strings) == 3 and strings[0] != "prun":
        code = strings[2]
    else:
        return None
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def _without_options(line: str, valued: str) -> str:
    """A magic's line without its leading options (``-n 10 -r 3 f(x)`` -> ``f(x)``)."""
    words = line.split(" ")
    while words and (words[0] == "" or words[0].startswith("-")):
        flag = words.pop(0)
        if len(flag) == 2 and flag[1] in valued:  # its value is the next word
            del words[:1]
    return " ".join(words)


class _WithoutDeadCode(ast.NodeTransformer):
    """The tree without the branches a constant condition never takes (``if False:``, the ``else``
    of ``if True:``, ``while 0:``): what is left is what can run."""

    def visit_If(self, node: ast.If) -> Any:
        self.generic_visit(node)
        if isinstance(node.test, ast.Constant):
            return node.body if node.test.value else node.orelse
        return node

    def visit_While(self, node: ast.While) -> Any:
        self.generic_visit(node)
        if isinstance(node.test, ast.Constant) and not node.test.value:
            return node.orelse
        return node


def _pickles(value: Any) -> bool:
    import cloudpickle

    try:
        cloudpickle.dumps(value)
    except Exception:
        return False
    return True


def free_names(tree: ast.Module) -> list[str]:
    """Names the cell reads that it has not bound yet, in order of first appearance.

    Top-level statements are followed in order (``x = x + 1`` reads ``x``; a loop variable is bound
    before its body runs); inside functions, lambdas, comprehensions and classes only the names they
    do not bind themselves count. A name bound in a branch counts as bound afterwards.
    """
    reader = _Reader()
    reader.block(tree.body)
    return list(reader.needed)


_SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


class _Reader:
    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.needed: dict[str, None] = {}

    def read(self, *nodes: ast.AST | None) -> None:
        for node in nodes:
            if node is None:
                continue
            for name in _reads(node):
                if name not in self.bound:
                    self.needed.setdefault(name, None)

    def block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.For | ast.AsyncFor):
            self.read(node.iter)
            self.bound |= _binds(node.target)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.While | ast.If):
            self.read(node.test)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                self.read(item.context_expr)
                if item.optional_vars is not None:
                    self.bound |= _binds(item.optional_vars)
            self.block(node.body)
        elif isinstance(node, ast.Try | ast.TryStar):
            self.block(node.body)
            for handler in node.handlers:
                self.read(handler.type)
                if handler.name:
                    self.bound.add(handler.name)
                self.block(handler.body)
            self.block(node.orelse)
            self.block(node.finalbody)
        else:
            self.read(node)
            self.bound |= _binds(node)


def _reads(node: ast.AST) -> set[str]:
    """Names ``node`` reads in the current scope, and the free names of the scopes it defines."""
    reads: set[str] = set()
    for child in _in_scope(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
            reads.add(child.id)
        elif isinstance(child, ast.AugAssign) and isinstance(child.target, ast.Name):
            reads.add(child.target.id)  # x += 1 reads x
        elif isinstance(child, _SCOPES):
            reads |= _free_in(child)
    return reads


def _binds(node: ast.AST) -> set[str]:
    """Names ``node`` binds in the current scope."""
    bound: set[str] = set()
    for child in _in_scope(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store | ast.Del):
            bound.add(child.id)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(child.name)
        elif isinstance(child, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in child.names}
        elif isinstance(child, ast.ExceptHandler) and child.name:
            bound.add(child.name)
        elif isinstance(child, ast.arg):
            bound.add(child.arg)
    return bound


def _in_scope(node: ast.AST) -> list[ast.AST]:
    """``node`` and its descendants, without the bodies of the scopes it contains (their headers stay)."""
    found: list[ast.AST] = []
    stack = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        if isinstance(current, _SCOPES):
            stack.extend(_scope_header(current))
            continue
        stack.extend(ast.iter_child_nodes(current))
    return found


def _scope_header(node: ast.AST) -> list[ast.AST]:
    """The parts of a scope evaluated where it is defined: decorators, defaults, bases, first iterable."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [*node.decorator_list, *node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]
    if isinstance(node, ast.Lambda):
        return [*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *[k.value for k in node.keywords]]
    if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
        return [node.generators[0].iter]
    return []


def _free_in(scope: ast.AST) -> set[str]:
    """Names a function/lambda/class/comprehension reads but does not bind itself."""
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        inner: list[ast.AST] = [scope.args, *(scope.body if isinstance(scope.body, list) else [scope.body])]
    elif isinstance(scope, ast.ClassDef):
        inner = list(scope.body)
    else:  # comprehension: its generators (targets, later iterables, conditions) and element(s)
        assert isinstance(scope, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp)
        elements = [scope.key, scope.value] if isinstance(scope, ast.DictComp) else [scope.elt]
        inner = [*scope.generators, *elements]
    reads: set[str] = set()
    bound: set[str] = set()
    declared_global: set[str] = set()
    for part in inner:
        for child in _in_scope(part):
            if isinstance(child, ast.Global):
                declared_global |= set(child.names)
        reads |= _reads(part)
        bound |= _binds(part)
    return reads - (bound - declared_global)


def _unshippable(values: Mapping[str, Any], error: Exception) -> SpecError:
    """The first name that does not pickle, and why (for a function: the global it uses that fails)."""
    import cloudpickle

    for name, value in values.items():
        try:
            cloudpickle.dumps(value)
        except Exception as e:
            culprit = _failing_global(value)
            uses = f", which uses {culprit[0]!r} (a {type(culprit[1]).__name__})" if culprit else ""
            return SpecError(
                f"cannot send {name!r} (a {type(value).__name__}{uses}) to the workers: {type(e).__name__}: {e} "
                f"(create it inside the %%gpugeek_run cell instead, e.g. {name} = ...)",
                field=name,
            )
    return SpecError(f"cannot send the cell's names to the workers: {type(error).__name__}: {error}", field="cell")


def _failing_global(value: Any) -> tuple[str, Any] | None:
    import cloudpickle

    function = value if isinstance(value, types.FunctionType) else None
    if function is None:
        return None
    for name in function.__code__.co_names:
        if name in function.__globals__:
            candidate = function.__globals__[name]
            if isinstance(candidate, types.ModuleType):
                continue
            try:
                cloudpickle.dumps(candidate)
            except Exception:
                return name, candidate
    return None


def _sources_of(values: Collection[Any]) -> dict[str, str]:
    """Source text of the notebook cells that defined the shipped functions/classes (for tracebacks)."""
    sources: dict[str, str] = {}
    for value in values:
        function = value if isinstance(value, types.FunctionType) else None
        if isinstance(value, type):
            function = next((v for v in vars(value).values() if isinstance(v, types.FunctionType)), None)
        if function is None or function.__module__ != "__main__":
            continue
        filename = function.__code__.co_filename
        lines = linecache.getlines(filename)
        if lines and filename not in sources:
            sources[filename] = "".join(lines)
    return sources
