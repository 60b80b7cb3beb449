"""The house plan, checked: binlake's modules import in one direction, and each stays a size a reader
can hold.

Folders by side, lowest first: the shared value objects at the top of the package, `source/` (what
talks to the server), `lake/` (Delta tables and the files beside them), `capture/` (the algorithm and
its steps), `spark/` (the data-source adapters), `databricks/`, `commands/`, and the command line. A
module imports its own side or one below it, never one above, and no module reaches itself again
through its imports -- counting imports inside functions and under TYPE_CHECKING, which hide a
circle from Python but not from a reader.

An import inside a function is there to defer something heavy: the JVM, or pyspark, Delta and
pyarrow, which a command such as `binlake check` or `binlake status` never needs. So one that names
a binlake module must name one that (through its own imports) loads one of those, from a module that
does not load it already.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "binlake"
SIDES = ["shared", "source", "lake", "capture", "spark", "databricks", "commands", "cli"]
# The reaches upward, each for its reason:
UPWARD = {
    # a run's context starts Spark the first time a step asks for the session, and registers the data
    # sources there (spark/ adapts capture/ to Spark, so it sits above it)
    ("binlake.capture.context", "binlake.spark.session"), ("binlake.capture.context", "binlake.spark.sources"),
    # a column's value forms are the server's: its character sets and MySQL's binary JSON
    ("binlake.schema", "binlake.source.charsets"), ("binlake.schema", "binlake.source.mysql_json"),
    # the configuration checks its TLS settings by the rules every connection uses
    ("binlake.config", "binlake.source.tls"),
}
HEAVY = ("pyspark", "delta", "pyarrow", "py4j")
GENERATED = {"binlake.source.charset_tables"}  # tables generated from the servers' character sets
MODULE_LINES, FUNCTION_LINES = 500, 80


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def side(module: str) -> str:
    parts = module.split(".")
    if module in ("binlake.cli", "binlake.__main__"):
        return "cli"
    return parts[1] if len(parts) > 2 else "shared"


def imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The names `node` imports, as modules where they are (a module's function: its module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if not MODULES[module].name == "__init__.py":
            package = package[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def imports(module: str, inside_functions: bool | None = None) -> list[tuple[str, int]]:
    """(module imported, line) for each import of `module`: all, or only those inside (or outside) functions."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if inside_functions is None or inside_functions == in_function:
                    found.extend((name, child.lineno) for name in imported(module, child))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(TREES[module], False)
    return found


GRAPH = {m: {n for n, _ in imports(m) if n in MODULES and n != m} for m in MODULES}


def test_no_module_reaches_itself_through_its_imports() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in MODULES:
        if module not in index:
            connect(module)
    assert circles == [], f"import circles: {circles}"


def test_no_side_imports_one_above_it() -> None:
    upward = [f"{m} imports {n} ({side(m)} -> {side(n)})" for m, targets in GRAPH.items() for n in targets
              if SIDES.index(side(n)) > SIDES.index(side(m)) and (m, n) not in UPWARD]
    assert upward == []


def loads_heavy(module: str, seen: set[str] | None = None) -> bool:
    """Whether importing `module` loads pyspark, Delta or pyarrow (at module level, its own or through
    the binlake modules it imports there)."""
    seen = set() if seen is None else seen
    seen.add(module)
    for name, _ in imports(module, inside_functions=False):
        if name.split(".")[0] in HEAVY:
            return True
        if name in MODULES and name not in seen and loads_heavy(name, seen):
            return True
    return False


def test_imports_inside_functions_only_defer_something_heavy() -> None:
    needless = [f"{MODULES[m].relative_to(SRC.parent)}:{line} imports {n} inside a function"
                for m in MODULES for n, line in imports(m, inside_functions=True)
                if n in MODULES and (loads_heavy(m) or not loads_heavy(n))]
    assert needless == []


def test_modules_and_functions_stay_readable_sizes() -> None:
    too_long = [f"{m}: {len(MODULES[m].read_text().splitlines())} lines" for m in MODULES
                if m not in GENERATED and len(MODULES[m].read_text().splitlines()) > MODULE_LINES]
    for m, tree in TREES.items():
        too_long += [f"{m}.{f.name}: {f.end_lineno - f.lineno + 1} lines" for f in ast.walk(tree)
                     if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and f.end_lineno is not None and f.end_lineno - f.lineno + 1 > FUNCTION_LINES]
    assert too_long == []


SERVER_TESTS = re.compile(r"mariadb: bool|is_mariadb|[\"']mariadb[\"'] in|[\"']mariadb[\"'] ==|== [\"']mariadb[\"']")


@pytest.mark.parametrize("module", sorted(set(MODULES) - {"binlake.source.dialect", "binlake.commands.devdb"}))
def test_server_differences_live_in_the_dialect(module: str) -> None:
    lines = [f"{n}: {line.strip()}" for n, line in enumerate(MODULES[module].read_text().splitlines(), 1)
             if SERVER_TESTS.search(line)]
    assert lines == [], "ask binlake.source.dialect.Dialect instead"
