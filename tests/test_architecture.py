"""The import map of src/cadenza: stages import only their own stage and those below it, no module
imports itself back through others, and an import inside a function says why it is there.

`violations` is the rule, a pure function of an import mapping: the tests below run it on a planted
violation (so it is seen to fail) and on the real tree, read with `ast` (module-level imports and
those inside functions; `if TYPE_CHECKING:` imports are not run, so they do not count).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# The layer order, bottom -> top: docs/architecture.md's layer table (a test checks that they agree).
# A module may import its own stage and any stage below it. The root package is the public API (one
# lazily loaded function per verb, from the stages below it), which the command line calls.
LAYERS = (
    ("cadenza.settings", "cadenza.atomic"),
    ("cadenza.env",),
    ("cadenza.data",),
    ("cadenza.models",),
    ("cadenza.listen",),
    ("cadenza.generation",),
    ("cadenza.evaluation",),
    ("cadenza.training",),
    ("cadenza.bench", "cadenza.demo", "cadenza.live"),
    ("cadenza.studio",),
    ("cadenza",),
    ("cadenza.cli",),
    ("cadenza.__main__",),
)
LAYER = {stage: level for level, stages in enumerate(LAYERS) for stage in stages}

# Modules whose function-level imports do not all say why yet: their owner is still editing them.
# Each is expected to fail the rule (a strict xfail); delete it here once its imports give their
# reason or move to the top of the file.
DOC = SRC.parent / "docs" / "architecture.md"


@dataclass(frozen=True)
class Import:
    """One import of a cadenza module: where it is, and whether it runs only when a function does."""

    target: str
    line: int
    in_function: bool = False
    reason: bool = False  # a `# lazy: ...` comment on its line or above its block of imports


@dataclass(frozen=True)
class Violation:
    kind: str  # "order", "cycle" or "unexplained"
    modules: tuple[str, ...]
    detail: str

    @property
    def key(self) -> tuple[str, ...]:
        return (self.kind, *self.modules)

    def __str__(self) -> str:
        return self.detail


def stage(module: str) -> str:
    """`cadenza.data.tokenizers.base` -> `cadenza.data`: the first two parts name the stage."""
    return ".".join(module.split(".")[:2])


def violations(imports: Mapping[str, Iterable[Import]]) -> list[Violation]:
    """Every import against the layer order, every import cycle between modules, and every
    function-level import without a reason, for a mapping module -> the cadenza imports it makes."""
    found, graph = [], {}
    for module, its in imports.items():
        its = list(its)
        graph[module] = {i.target for i in its if i.target != module}
        for i in its:
            low, high = stage(module), stage(i.target)
            if high not in LAYER or low not in LAYER:
                found.append(Violation("order", (module, high), f"{module} or {i.target}: a stage not in LAYERS"))
            elif LAYER[high] > LAYER[low]:
                found.append(Violation("order", (module, high),
                                       f"{module}:{i.line} imports {i.target}, a stage above its own"))
            if i.in_function and not i.reason:
                found.append(Violation("unexplained", (module,), f"{module}:{i.line} imports {i.target} inside a "
                                                                 "function without a `# lazy: <why>` comment"))
    found += [Violation("cycle", tuple(sorted(c)), "import cycle: " + " <-> ".join(sorted(c))) for c in cycles(graph)]
    return found


def cycles(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# ---- reading the tree -------------------------------------------------------------------------
def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_imports(path: Path, modules: set[str]) -> list[Import]:
    """The cadenza imports of one source file. `from a import b` imports module `a.b` when there is
    one, else `a`."""
    source = path.read_text()
    lines, name = source.splitlines(), module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[Import] = []

    def explained(block: list[ast.stmt], i: int) -> bool:
        first = i
        while first > 0 and isinstance(block[first - 1], (ast.Import, ast.ImportFrom)):
            first -= 1
        above = lines[block[first].lineno - 2].strip() if block[first].lineno > 1 else ""
        return "# lazy:" in lines[block[i].lineno - 1] or above.startswith("# lazy:")

    def walk(block: list[ast.stmt], in_function: bool) -> None:
        for i, node in enumerate(block):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in targets(node, package, modules):
                    out.append(Import(target, node.lineno, in_function, in_function and explained(block, i)))
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for child in child_blocks(node):
                walk(child, inner)

    walk(ast.parse(source).body, False)
    return out


def child_blocks(node: ast.stmt) -> Iterable[list[ast.stmt]]:
    """The statement lists nested in a statement: bodies, else and finally blocks, handlers, cases."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(node, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for nested in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
        yield nested.body


def targets(node: ast.Import | ast.ImportFrom, package: str, modules: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "cadenza"]
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    if base.split(".")[0] != "cadenza":
        return []
    return sorted({f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names})


def tree_imports() -> dict[str, list[Import]]:
    paths = sorted((SRC / "cadenza").rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): read_imports(p, modules) for p in paths}


# ---- the tests ----------------------------------------------------------------------------------
def test_a_planted_upward_import_and_cycle_are_caught():
    planted = {
        "cadenza.data.store": [Import("cadenza.cli", 3)],
        "cadenza.models.a": [Import("cadenza.models.b", 1)],
        "cadenza.models.b": [Import("cadenza.models.a", 9, in_function=True, reason=True)],
        "cadenza.models.c": [Import("cadenza.data.store", 2), Import("cadenza.models.a", 5, in_function=True)],
    }
    found = {v.key: str(v) for v in violations(planted)}
    assert found == {
        ("order", "cadenza.data.store", "cadenza.cli"):
            "cadenza.data.store:3 imports cadenza.cli, a stage above its own",
        ("cycle", "cadenza.models.a", "cadenza.models.b"): "import cycle: cadenza.models.a <-> cadenza.models.b",
        ("unexplained", "cadenza.models.c"): "cadenza.models.c:5 imports cadenza.models.a inside a function "
                                             "without a `# lazy: <why>` comment",
    }
    assert violations({"cadenza.cli": [Import("cadenza.data.store", 1)], "cadenza.data.store": []}) == []


def test_every_module_is_read_with_its_imports():
    imports = tree_imports()
    assert {"cadenza", "cadenza.cli", "cadenza.data.tokenizers.base", "cadenza.models.checkpoint"} <= set(imports)
    checkpoint = {i.target for i in imports["cadenza.models.checkpoint"]}
    assert {"cadenza.models.zoo", "cadenza.data.tokenizers", "cadenza.atomic"} <= checkpoint
    grammar = [i for i in imports["cadenza.data.tokenizers.base"] if i.target.endswith(".grammar")]
    assert grammar and all(i.in_function and i.reason for i in grammar)


def test_imports_follow_the_layer_order_without_cycles():
    found = [str(v) for v in violations(tree_imports()) if v.kind != "unexplained"]
    assert not found, "\n".join(found)


def test_function_level_imports_say_why():
    found = [str(v) for v in violations(tree_imports()) if v.kind == "unexplained"]
    assert not found, "\n".join(found)


# ---- the map in docs/architecture.md ------------------------------------------------------------
def doc_stage(name: str) -> str:
    """A stage as the layer table writes it -> its module: `env/` -> cadenza.env, `__init__.py` -> cadenza."""
    if name == "__init__.py":
        return "cadenza"
    return "cadenza." + name.removesuffix("/").removesuffix(".py")


def doc_layers(text: str) -> tuple[tuple[str, ...], ...]:
    """The layer table of docs/architecture.md, bottom -> top: each numbered row's stages, in order."""
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", text, flags=re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), "the layer table's rows are numbered 1, 2, ..."
    return tuple(tuple(doc_stage(n) for n in re.findall(r"`([^`]+)`", cells)) for _, cells in rows)


def test_the_documented_layer_table_is_the_one_checked_here():
    assert doc_layers(DOC.read_text()) == LAYERS


def test_every_module_is_named_in_the_architecture_doc():
    named = set(re.findall(r"`([\w/]+\.py)`", DOC.read_text()))
    files = sorted(p.relative_to(SRC / "cadenza").as_posix() for p in (SRC / "cadenza").rglob("*.py"))
    missing = [f for f in files if f not in named]
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)
