import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Under pytest-xdist (`make test`: one worker per core) each worker, and what it starts, computes
    on one thread: two workers with a thread per core each would fight over the cores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"  # read by torch at import, and inherited by subprocesses
    # Ray reads two settings once per process: its auth mode at first use and, when its constants are
    # imported, whether a local address means loopback. This process (and what it starts) uses them as its
    # shared head and subprocess drivers do (gridtools.RAY_ENV) from the start, so that in-process grids can
    # join that head (a loopback head: 127.0.0.1 must not be resolved to the machine's address) whatever
    # imported Ray first
    try:
        from tests.platform.gridtools import RAY_ENV
    except ModuleNotFoundError:  # a partial copy of the suite (tests/decoders/test_new_decoder.py) starts no Ray
        return
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        os.environ[key] = RAY_ENV[key]


def shared_dir() -> Path:
    """../shared beside the repository (CI lays it there); RIPPLE_SHARED overrides."""
    return Path(os.environ.get("RIPPLE_SHARED", REPO.parent / "shared")).resolve()


@pytest.fixture(scope="session")
def shared() -> Path:
    path = shared_dir()
    if not (path / "golden").is_dir():
        raise RuntimeError(f"../shared not found at {path}; set RIPPLE_SHARED")  # a missing fixture is an error, not a skip
    return path


@pytest.fixture(scope="session")
def golden(shared) -> Path:
    return shared / "golden"


@pytest.fixture(scope="session")
def harness_task_objects(shared, tmp_path_factory):
    """lm-evaluation-harness's gsm8k, minerva_math500, humaneval and mbpp task objects on ../shared/data
    (once per session); `simple_evaluate` builds the requests it runs itself."""
    from tests.harness_tools import load_tasks

    return load_tasks(shared / "data", tmp_path_factory.mktemp("harness-tasks"))


@pytest.fixture(scope="session")
def harness_tasks(harness_task_objects):
    """The same tasks with every test doc's plain prompt built (once per session: about 15 CPU seconds)."""
    from tests.harness_tools import prompts

    return {name: (task, prompts(task)) for name, task in harness_task_objects.items()}


@pytest.fixture(scope="session")
def grid_store(tmp_path_factory, mlflow_db):
    """One real store of the demo grid (two samples per cell: a cell's bootstrap intervals need two) and
    the rps-tiny grid (Confidence at four taus, RPS variants; one sample per cell), with MLflow, and their
    `ripple grid --json` summaries: for test_grid.py and the dashboards' tests. Built once (the grids take
    most of these tests' time), then the demo grid run again, which must compute nothing (`grid_rerun`);
    nothing changes the store after that."""
    import json

    from filelock import FileLock

    from tests.platform.gridtools import run_grid

    root = _xdist_shared(tmp_path_factory)
    store, summaries = root / "grid-store" / "store", root / "grid-store" / "summaries.json"
    (root / "grid-store").mkdir(exist_ok=True)
    with FileLock(str(root / "grid-store.lock")):
        if not summaries.exists():
            from tests.platform.gridtools import seed_mlflow

            seed_mlflow(store, mlflow_db)
            # the demo grid is the suite's largest: a longer guard than run_grid's default on a loaded machine.
            # One worker per model: each costs about 3 s of CPU to start, and the other xdist worker keeps
            # the second core busy anyway
            grids = {name: run_grid(name, "--limit", limit, "--store", str(store), "--workers", "1", timeout=900)
                     for name, limit in (("demo", "2"), ("rps-tiny", "1"))}
            before = _mlflow_run_ids(store, "demo")
            again = run_grid("demo", "--limit", "2", "--store", str(store), "--workers", "1")
            (root / "grid-store" / "rerun.json").write_text(json.dumps({"summary": again, "run_ids_before": before}))
            summaries.write_text(json.dumps(grids))
    return store, json.loads(summaries.read_text())


@pytest.fixture(scope="session")
def mlflow_db(tmp_path_factory) -> Path:
    """An empty MLflow SQLite store, its schema migrated (MLflow's migrations cost a new database about
    3 s of CPU): a test that is not about creating the store copies it to where its run will look."""
    from filelock import FileLock
    from mlflow.tracking import MlflowClient

    root = _xdist_shared(tmp_path_factory)
    db = root / "mlflow-template" / "mlflow.db"
    db.parent.mkdir(exist_ok=True)
    with FileLock(str(root / "mlflow-template.lock")):
        if not db.exists():
            part = db.with_name("building.db")
            part.unlink(missing_ok=True)
            MlflowClient(tracking_uri=f"sqlite:///{part}").search_experiments()  # creates and migrates it
            part.replace(db)
    return db


@pytest.fixture(scope="session")
def grid_rerun(grid_store, tmp_path_factory) -> dict:
    """The demo grid of `grid_store` run a second time: its summary, and the MLflow run ids before it."""
    import json

    return json.loads((_xdist_shared(tmp_path_factory) / "grid-store" / "rerun.json").read_text())


def _xdist_shared(tmp_path_factory) -> Path:
    """The session's base temp directory, shared by the xdist workers (the first to ask builds, the other waits)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def _mlflow_run_ids(store: Path, experiment: str) -> list[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    return sorted(r.info.run_id for r in client.search_runs([exp.experiment_id], max_results=1000))


@pytest.fixture(scope="module")
def ray_joined():
    """This process joined to its shared Ray head for the module; each in-process grid or sweep uses it."""
    from tests.platform.gridtools import joined_ray

    with joined_ray():
        yield


# The longest files of the fresh-clone CI run (2026-12-06, --durations): started first. test_leaderboard.py
# first of all: it builds `grid_store`, which the other files reading it then find built, handed out last
# of the slow files, instead of waiting for it
_LONGEST = ("test_leaderboard.py", "test_grid_resume.py", "test_grid_faults.py")
_STORE_READERS = ("test_grid.py", "test_ui_browser.py")


# Files that share a costly session fixture, handed out as one unit so that one worker builds it:
# lm-evaluation-harness's task objects (`harness_task_objects`: about 7 s of CPU per process)
_SHARED_FIXTURE_FILES = {name: "harness" for name in ("tests/platform/experiments/test_harness.py",
                                                       "tests/tasks/test_harness_agreement.py")}


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (make test), with the files of `_SHARED_FIXTURE_FILES` as one unit each."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return _SHARED_FIXTURE_FILES.get(path, path)

    return SharedFixtureFiles(config, log)


def pytest_collection_modifyitems(config, items):
    """Longest files first, then the other files with slow tests, then the many quick files: under
    `make test`'s two xdist workers (whole files per worker, handed out in this order; the Makefile
    turns off xdist's own reordering by test count) the long files start at once and the quick ones
    fill in at the end, so both workers finish together."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item):
        name = item.path.name
        if name in _LONGEST:
            return _LONGEST.index(name), False, False
        return len(_LONGEST), item.path not in slow_files, name in _STORE_READERS

    items.sort(key=rank)  # stable: the order within each group stays
