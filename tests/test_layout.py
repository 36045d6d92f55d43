"""The package's shape: no import cycles between its modules (imports inside functions and under
TYPE_CHECKING count too), and no module reaches into another's underscore names."""
import ast
from pathlib import Path

import ripple

ROOT = Path(ripple.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _target(module: str, node: ast.AST) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for one import statement of `module`."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names]
    if node.level:
        package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, a.name) for a in node.names]


def _imports() -> dict[str, set[tuple[str, str | None]]]:
    graph = {}
    for module, path in MODULES.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target, name in _target(module, node):
                    while target and target not in MODULES:
                        target = target.rpartition(".")[0]
                    if target and target != module:
                        found.add((target, name))
        graph[module] = found
    return graph


GRAPH = _imports()


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan). A package's __init__ importing
    its own submodules is not a cycle with them unless they import the package's __init__ back."""
    edges = {m: {t for t, _ in deps} for m, deps in GRAPH.items()}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_between_modules():
    assert _cycles() == []


def test_the_cycle_finder_sees_a_cycle():
    GRAPH["ripple.errors"].add(("ripple.cli", None))  # errors -> cli -> errors
    try:
        assert any({"ripple.errors", "ripple.cli"} <= set(c) for c in _cycles())
    finally:
        GRAPH["ripple.errors"].discard(("ripple.cli", None))


def test_no_module_imports_another_modules_underscore_names():
    offenders = [(m, t, n) for m, deps in GRAPH.items() for t, n in deps
                 if n and n.startswith("_") and not n.startswith("__")]
    assert offenders == []


def test_the_runtime_depends_on_neither_the_experiment_system_nor_training():
    for module, deps in GRAPH.items():
        if module.startswith("ripple.platform.runtime"):
            assert not [t for t, _ in deps if t.startswith(("ripple.platform.experiments", "ripple.platform.training"))]
        if module.startswith("ripple.platform.training"):
            assert not [t for t, _ in deps if t.startswith("ripple.platform.experiments")]
