"""The package's shape: no import cycles between its modules (imports inside functions and under
TYPE_CHECKING count too), and no module reaches into another's underscore names."""
import ast
import graphlib
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


def _cycle() -> list[str]:
    """One import cycle (modules, the first repeated at the end), or [] when there is none."""
    sorter = graphlib.TopologicalSorter({m: {t for t, _ in deps} for m, deps in GRAPH.items()})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        return exc.args[1]
    return []


def test_no_import_cycles_between_modules():
    assert _cycle() == []


def test_the_cycle_finder_sees_a_cycle():
    GRAPH["ripple.errors"].add(("ripple.cli", None))  # errors -> cli -> errors
    try:
        assert {"ripple.errors", "ripple.cli"} <= set(_cycle())
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
