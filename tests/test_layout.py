"""The package's shape: imports only point down the layers of DESIGN.md section 1, no import cycles
between modules, and no module reaches into another's underscore names. Every import statement is
parsed with `ast`, those inside functions and under TYPE_CHECKING included."""
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


def _import_lines(module: str, source: str) -> list[tuple[str, str | None, int]]:
    """(imported ripple module, imported name or None, line) for every import statement in `source`,
    the text of `module`, at any depth (module level, functions, classes, TYPE_CHECKING blocks)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target, name in _target(module, node):
                while target and target not in MODULES:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    found.append((target, name, node.lineno))
    return found


def _imports() -> dict[str, set[tuple[str, str | None]]]:
    return {module: {(t, n) for t, n, _ in _import_lines(module, path.read_text())} for module, path in MODULES.items()}


GRAPH = _imports()

# DESIGN.md section 1, top to bottom; the components in a tuple are peers and import neither each other
# nor anything above. Inside the platform its rooms are layered the same way.
LAYERS = ("testing", "cli", "sweeps", "dashboards", "bench", "platform", ("decoders", "tasks"), "plugins", ("errors", "progress"))
PLATFORM_ROOMS = (("experiments", "training"), "runtime")


def _layer(layers: tuple, name: str) -> int | None:
    return next((i for i, x in enumerate(layers) if name == x or (isinstance(x, tuple) and name in x)), None)


def _breach(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported`, or None when the import points down (or stays in its component)."""
    a, b = importer.split(".")[1:], imported.split(".")[1:]
    layers = LAYERS
    while a and b and a[0] == b[0]:
        if a[0] != "platform" or layers is PLATFORM_ROOMS:
            return None  # inside one component (or one room)
        a, b, layers = a[1:], b[1:], PLATFORM_ROOMS
    if not a or not b:
        return None  # a package's own __init__ (the root, ripple.platform) holds no code to layer
    where = "ripple" if layers is LAYERS else "ripple.platform"
    for name in (a[0], b[0]):
        if _layer(layers, name) is None:
            return f"{where}.{name} is in no layer of tests/test_layout.py (DESIGN.md section 1): place it there"
    up, down = _layer(layers, a[0]), _layer(layers, b[0])
    if down > up:
        return None
    return f"{b[0]} and {a[0]} are peers" if down == up else f"{b[0]} is above {a[0]}"


def upward_imports(module: str, source: str) -> list[str]:
    """One line per import in `source` (the text of `module`) that does not point down: file, line, why."""
    path = MODULES[module].relative_to(ROOT.parent)
    found = dict.fromkeys((target, line) for target, _, line in _import_lines(module, source))  # one per module a line imports
    return [f"{path}:{line}: {module} imports {target}: {why}" for target, line in found
            if (why := _breach(module, target))]


def _cycle() -> list[str]:
    """One import cycle (modules, the first repeated at the end), or [] when there is none."""
    sorter = graphlib.TopologicalSorter({m: {t for t, _ in deps} for m, deps in GRAPH.items()})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        return exc.args[1]
    return []


def test_imports_only_point_down():
    offenders = [line for module, path in MODULES.items() for line in upward_imports(module, path.read_text())]
    assert offenders == [], "\n".join(offenders)


# The import demo.py once made inside run_demo: the platform reaching up into the dashboards.
OLD_DEMO_FUNCTION = """

def run_demo(model="ripple-tiny", limit=50, cache="none", store=None):
    from ...dashboards.leaderboard import build_leaderboard, summary_line

    return summary_line(build_leaderboard(store))
"""


def test_the_layering_check_catches_an_upward_import_inside_a_function():
    module = "ripple.platform.experiments.demo"
    source = MODULES[module].read_text()
    assert upward_imports(module, source) == []
    old = source + OLD_DEMO_FUNCTION
    line = old.splitlines().index("    from ...dashboards.leaderboard import build_leaderboard, summary_line") + 1
    assert upward_imports(module, old) == [f"ripple/platform/experiments/demo.py:{line}: {module} imports "
                                           f"ripple.dashboards.leaderboard: dashboards is above platform"]


def test_the_layering_check_catches_peers_rooms_and_unplaced_components():
    bad = {"ripple.platform.runtime.engine": ("import ripple.bench.presets\n", "bench is above platform"),
           "ripple.decoders.rps": ("from ..tasks import get_task\n", "tasks and decoders are peers"),
           "ripple.platform.runtime.loading": ("def f():\n    from ..experiments import store\n",
                                              "experiments is above runtime"),
           "ripple.platform.training.train": ("from ..experiments.grid import run_grid\n",
                                             "experiments and training are peers")}
    for module, (source, why) in bad.items():
        (problem,) = upward_imports(module, source)
        assert problem.startswith(str(MODULES[module].relative_to(ROOT.parent)) + ":") and problem.endswith(why)
    assert upward_imports("ripple.bench.cli", "from ..platform.experiments import grid\nimport ripple.errors\n") == []
    MODULES["ripple.lab"] = ROOT / "lab.py"  # a new top-level component nobody placed yet
    try:
        assert upward_imports("ripple.cli", "from .lab import x\n") == [
            "ripple/cli.py:1: ripple.cli imports ripple.lab: ripple.lab is in no layer of tests/test_layout.py "
            "(DESIGN.md section 1): place it there"]
    finally:
        del MODULES["ripple.lab"]


def test_nothing_in_the_platform_is_a_benchmark():
    # a shipped grid spec is named for what it runs (`ripple grid parallelbench`: ParallelBench's sweep)
    grids = ROOT / "platform" / "experiments" / "grids"
    assert [p for p in (ROOT / "platform").rglob("*") if "bench" in p.name and p.parent != grids] == []


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
