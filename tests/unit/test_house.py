"""House rules that CI enforces beside ruff and mypy (``make lint``): the packages keep to
their floors (no import runs back up, see ``FLOORS``), runtime modules stay small enough to
read in one sitting, and the packages keep to their roles. What runs in Spark's Python
workers (``recovery/executor/``) and the Redis I/O both sides use (``recovery/redis_io/``)
never import the driver side; the claim and the hand-over never import each other; the job
never imports its test tooling (``recovery/testing/``); only ``recovery/redis_io/`` sends
Redis commands (``SENDS_OUTSIDE`` names the exceptions, each with why); tests share code
only through ``tests/support/``; and the tests of every runtime module are found from its
path: ``tests/unit/<pkg>/test_<mod>.py``, which imports it, or the test module
``tests/support/homes.py`` names."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from tests.support.fresh_modules import loaded_by
from tests.support.homes import TESTED_ELSEWHERE

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "recovery"
# A module's length is a smell to look at, not a rule that forces a split: past LOOK_AT lines
# it is named in LONG_BY_CONCERN with why it is still one concern; past MAX_LINES never.
LOOK_AT = 400
MAX_LINES = 700
LONG_BY_CONCERN: dict[str, str] = {}  # "recovery/x/y.py": "why it is one concern"
MODULES = sorted(PACKAGE.rglob("*.py"))
# The driver side: orchestration, the settings model and the library it is built with.
DRIVER_SIDE = ("recovery.driver", "recovery.settings", "pydantic", "pydantic_settings")
# ...and the one module of another package that Python workers run: the dead-letter reader.
WORKER_SIDE = sorted(m for m in MODULES if m.relative_to(PACKAGE).parts[0] in
                     ("executor", "redis_io")
                     or m == PACKAGE / "dead_letters" / "read.py")
TEST_TOOLING = ("recovery.testing", "tests")
# The package's floors, ground first, each with its reason to exist: a module imports only
# from its own package and the floors below it (``recovery/__init__.py``, the face, from any).
FLOORS = (
    "recovery.errors",        # typed errors and their exit codes
    "recovery.counts",        # counts read from outside, parsed defensively
    "recovery.params",        # what travels from the driver to the executors
    "recovery.rows",          # the typed rows health, report, progress and metrics share
    "recovery.vocabulary",    # the outcome's words (actions, routes, reasons, modes): no Spark
    "recovery.schemas",       # the Spark schemas and Arrow types of every DataFrame
    "recovery.handlers",      # the handler contract and the example handlers
    "recovery.redis_io",      # Redis: connections, commands, round trips, Lua scripts
    "recovery.settings",      # every job's settings (pydantic, driver side)
    "recovery.targets",       # which keys a job works on
    "recovery.executor",      # what Spark's Python workers run: claim, hand-over, counts
    "recovery.report",        # a run's report: Parquet rows, tables, the JSON summary
    "recovery.spark",         # Spark itself: sessions, daemon module, errors, DataFrames
    "recovery.driver",        # the recovery run, orchestrated on the driver
    "recovery.dead_letters",  # dead letters as data (jobs/dead_letters.py)
    "recovery.redrive",       # dead letters back to their streams (jobs/redrive.py)
    "recovery.metrics",       # a job's metrics, pushed to a Prometheus Pushgateway
    "recovery.console",       # the dead-letter console: a web app over Redis, no Spark
    "recovery.starter",       # the starter files `init` writes (config, alerts, DAG)
    "recovery.jobs",          # one command class per job, each module its spark-submit file
    "recovery.cli",           # the `redis-stream-recovery` command line, which runs the jobs
    "recovery.testing",       # throwaway servers and backlogs for the demo and the tests
)
# The package's face, ``python -m recovery`` and the command's name kept for compatibility
# (``recovery.jobs.submit``): they may import from any floor.
FACES = (PACKAGE / "__init__.py", PACKAGE / "__main__.py", PACKAGE / "jobs" / "submit.py")
SIBLINGS_APART = ("recovery.executor.claim", "recovery.executor.handover")
# Every test module, wherever it sits: tests/unit/..., tests/integration/...
TEST_MODULES = sorted((ROOT / "tests").rglob("test_*.py"))


def dotted(module: Path) -> str:
    """``recovery/executor/claim/loop.py`` -> ``recovery.executor.claim.loop`` (a package's
    ``__init__.py``: the package)."""
    parts = module.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # read once per file: the house tests ask of each module many times
def imported(module: Path) -> frozenset[str]:
    """Every module `module` imports, anywhere in it (at run time, in a function, for type
    checking), as absolute names; ``from a import b`` counts as ``a`` and ``a.b``."""
    here = dotted(module) if module.name == "__init__.py" else dotted(module).rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `level - 1` levels above this one
                anchor = ".".join(here.split(".")[:len(here.split(".")) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(names)


def within(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def module_id(module: Path) -> str:
    return str(module.relative_to(ROOT))


def floor_of(name: str) -> int | None:
    """The index in FLOORS of the package `name` belongs to; None outside them."""
    for i, root in enumerate(FLOORS):
        if within(name, (root,)):
            return i
    return None


def test_every_module_stands_on_a_floor() -> None:
    """A new package is given its floor (and its reason) in FLOORS before it lands."""
    assert [module_id(m) for m in MODULES if m not in FACES and floor_of(dotted(m)) is None] == []


@pytest.mark.parametrize("module", [m for m in MODULES if m not in FACES], ids=module_id)
def test_no_import_runs_back_up(module: Path) -> None:
    """Each module imports only from its own package and the floors below it."""
    here = floor_of(dotted(module))
    assert here is not None
    above = sorted(n for n in imported(module)
                   if (floor := floor_of(n)) is not None and floor > here)
    assert above == []


@pytest.mark.parametrize("module", [m for m in MODULES if within(dotted(m), SIBLINGS_APART)],
                         ids=module_id)
def test_claim_and_hand_over_never_import_each_other(module: Path) -> None:
    """The executor's claim and hand-over meet only in what they share one floor down
    (``recovery.executor.claimed``, the counts)."""
    own = next(root for root in SIBLINGS_APART if within(dotted(module), (root,)))
    others = tuple(root for root in SIBLINGS_APART if root != own)
    assert sorted(n for n in imported(module) if within(n, others)) == []


@pytest.mark.parametrize("module", MODULES, ids=module_id)
def test_runtime_module_is_under_the_house_limit(module: Path) -> None:
    lines = len(module.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (
        f"{module_id(module)} has {lines} lines (limit {MAX_LINES}): split it by concern")
    assert lines <= LOOK_AT or module_id(module) in LONG_BY_CONCERN, (
        f"{module_id(module)} has {lines} lines: split it by concern, or name it in "
        "LONG_BY_CONCERN with why it is one concern")


def test_every_long_module_named_is_long() -> None:
    """LONG_BY_CONCERN names only modules that exist and are past LOOK_AT."""
    long = {module_id(m) for m in MODULES
            if len(m.read_text(encoding="utf-8").splitlines()) > LOOK_AT}
    assert set(LONG_BY_CONCERN) <= long


@pytest.mark.parametrize("module", WORKER_SIDE, ids=module_id)
def test_executor_and_redis_io_never_import_the_driver_side(module: Path) -> None:
    """Python workers import these modules at their first task: the settings model
    (pydantic) and the orchestration stay on the driver; only ``recovery.params`` travels."""
    assert sorted(n for n in imported(module) if within(n, DRIVER_SIDE)) == []


@pytest.mark.slow
def test_what_the_workers_import_loads_no_driver_side() -> None:
    """The rule above, through every import of every worker-side module (the top-level
    modules they use, the report's workers' writer, the handlers), in a fresh interpreter."""
    workers = [dotted(m) for m in WORKER_SIDE]
    workers += ["recovery.handlers", "recovery.params", "recovery.report.worker_files"]
    assert [m for m in loaded_by(workers) if within(m, DRIVER_SIDE)] == []


def test_the_job_never_imports_its_test_tooling() -> None:
    """recovery/testing/ (throwaway servers, seeded backlogs) is for the demo, notebook and
    tests: no module of the job itself imports it, nor anything of tests/."""
    runtime = [m for m in MODULES if m.relative_to(PACKAGE).parts[0] != "testing"]
    offenders = {module_id(m): sorted(n for n in imported(m) if within(n, TEST_TOOLING))
                 for m in runtime}
    assert {m: names for m, names in offenders.items() if names} == {}


@pytest.mark.slow
def test_tests_share_code_only_through_their_support_package() -> None:
    """A helper a second test module needs lives in tests/support/, not in a test module or
    conftest.py (pytest may import those under another name, and run a module's tests
    twice where another imports it)."""
    shared = ("tests.conftest", *(dotted(m) for m in TEST_MODULES))
    offenders = {module_id(m): sorted(n for n in imported(m) if within(n, shared))
                 for m in sorted((ROOT / "tests").rglob("*.py"))}
    assert {m: names for m, names in offenders.items() if names} == {}


def test_the_daemon_module_loads_no_pyspark() -> None:
    """Spark's Python daemon is ``recovery.spark.pyspark_path``, which must fix the path
    before anything imports pyspark: ``recovery`` and ``recovery.spark`` import nothing
    heavy."""
    heavy = ("pyspark", "py4j", "pydantic", "redis")
    assert [m for m in loaded_by(["recovery.spark.pyspark_path"]) if within(m, heavy)] == []


def holds_code(module: Path) -> bool:
    """False for a package face that is only a docstring: nothing in it to test."""
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
               for node in ast.parse(module.read_text(encoding="utf-8")).body)


def own_test(module: Path) -> Path:
    """Where the tests of `module` are found from its path: ``recovery/<pkg>/<mod>.py`` ->
    ``tests/unit/<pkg>/test_<mod>.py``; a package ``recovery/<parent>/<pkg>/__init__.py`` ->
    ``tests/unit/<parent>/test_<pkg>.py`` (``recovery/__init__.py``:
    ``tests/unit/test_recovery.py``)."""
    rel = module.relative_to(PACKAGE)
    if module.name == "__init__.py":
        name = rel.parent.name or "recovery"
        return ROOT / "tests" / "unit" / rel.parent.parent / f"test_{name}.py"
    return ROOT / "tests" / "unit" / rel.parent / f"test_{rel.stem}.py"


def reached_from(test: Path) -> set[str]:
    """The modules of the package a test module imports, and all they import in turn."""
    by_name = {dotted(m): m for m in MODULES}
    seen: set[str] = set()
    todo = [n for n in imported(test) if n in by_name]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(n for n in imported(by_name[name]) if n in by_name)
    return seen


def reaches(test: Path, module: Path, how: str) -> bool:
    """Whether `test` reaches `module` as `how` says (tests/support/homes.py)."""
    name = dotted(module)
    if how == "imports it":
        return name in imported(test)
    if how.startswith("through "):
        neighbour = how.removeprefix("through ")
        return neighbour in reached_from(test) and name in imported(
            next(m for m in MODULES if dotted(m) == neighbour))
    if how == "runs it: python -m recovery":
        return name == "recovery.__main__" and '"-m", "recovery"' in test.read_text("utf-8")
    return False


TESTED = [m for m in MODULES if holds_code(m)]


@pytest.mark.parametrize("module", TESTED, ids=module_id)
def test_every_runtime_module_is_found_from_its_path(module: Path) -> None:
    """The tests of ``recovery/<pkg>/<mod>.py`` are ``tests/unit/<pkg>/test_<mod>.py``, which
    imports it; or the module is named in ``tests.support.homes.TESTED_ELSEWHERE`` with the
    test module that reaches it, and how. Package faces that are only a docstring aside."""
    own = own_test(module)
    if module_id(module) not in TESTED_ELSEWHERE:
        assert own.exists(), (f"write {own.relative_to(ROOT)}, or name the test that reaches "
                              "the module in tests/support/homes.py")
        assert dotted(module) in imported(own), f"{own.relative_to(ROOT)} does not import it"
        return
    test, how = TESTED_ELSEWHERE[module_id(module)]
    assert not (own.exists() and dotted(module) in imported(own)), (
        f"{own.relative_to(ROOT)} tests it: take it out of tests/support/homes.py")
    assert (ROOT / test).is_file(), test
    assert reaches(ROOT / test, module, how), f"{test} does not reach it as {how!r}"


def test_homes_names_only_modules_that_hold_code() -> None:
    assert sorted(set(TESTED_ELSEWHERE) - {module_id(m) for m in TESTED}) == []


# Redis behind one door: only ``recovery/redis_io`` (and the test tooling) sends commands.
REDIS_DOOR = ("recovery.redis_io", "recovery.testing")
# Sends left outside the door for now, each with why: "recovery/x.py:function": "why".
SENDS_OUTSIDE: dict[str, str] = {
    "recovery/targets/keys.py:check_server": "the server probe (PING, version), which the "
    "server-features work moves whole",
}
# A command name as the job writes it first in a command tuple: ``("XLEN", key)``.
COMMAND_WORD = re.compile(r"[A-Z]+(?: [A-Z]+)?")
# A variable that holds a Redis client, connection or pipeline: ``client``, ``self._client``.
CLIENT_NAME = re.compile(r"_?(\w*client|conn|connection|pipe|pipeline|node|redis|r)")
ALWAYS_A_SEND = ("execute_command", "pipeline")
SCRIPT_HANDLES = ("scripts_for", "load_scripts", "register_script")  # the Lua scripts' callers


def redis_command_methods() -> frozenset[str]:
    """The command methods of redis-py's clients (``xlen``, ``xinfo_groups``, ``ping``...)."""
    from redis.commands.cluster import RedisClusterCommands
    from redis.commands.core import CoreCommands
    return frozenset(n for cls in (CoreCommands, RedisClusterCommands) for n in dir(cls)
                     if not n.startswith("_"))


def receiver_name(node: ast.expr) -> str:
    """``client`` of ``client.xlen``, ``_client`` of ``self._client.xlen``; else ""."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def redis_sends(source: str) -> list[tuple[str, int, str]]:
    """(function, line, what) for each Redis command `source` sends itself: a command tuple
    or list (``("XLEN", key)``, a command word first, something other than a constant after
    it), ``execute_command`` or ``pipeline`` on anything, a handle on the Lua scripts
    (``scripts_for(client)``), or a redis-py command method called on a client
    (``client.xlen(key)``; a holder's ``client.get()`` without a key aside)."""
    methods = redis_command_methods()
    words = {m.split("_")[0].upper() for m in methods}
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
            first = node.elts[0]
            if (isinstance(first, ast.Constant) and isinstance(first.value, str)
                    and COMMAND_WORD.fullmatch(first.value)
                    and first.value.split()[0] in words
                    and not all(isinstance(e, ast.Constant) for e in node.elts)):
                found.append((function, node.lineno, f"command {first.value}"))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in SCRIPT_HANDLES):
            found.append((function, node.lineno, f"{node.func.id}()"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            keyless_get = name == "get" and not node.args and not node.keywords
            if name in ALWAYS_A_SEND or (
                    name in methods and not keyless_get
                    and CLIENT_NAME.fullmatch(receiver_name(node.func.value))):
                found.append((function, node.lineno, f".{name}()"))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "")
    return found


def test_redis_sends_are_found() -> None:
    """The rule below sees each way a module sends a command, and no log or dict call."""
    source = '''
def f(client, pipe, key):
    client.execute_command("XLEN", key)
    each(client, [("XPENDING", key, "g") for _ in ()])
    self._client.xinfo_groups(key)
    pipe.xack(key, "g", "1-0")
    holder.get()
    log.info("x %s", key)
    LEVELS = ("DEBUG", "INFO")
    row.get("name")
    client.get()
    scripts_for(client)["redrive"](keys=[key], args=[])
'''
    assert [(line, what) for _, line, what in redis_sends(source)] == [
        (3, ".execute_command()"), (4, "command XPENDING"),
        (5, ".xinfo_groups()"), (6, ".xack()"), (12, "scripts_for()")]


@pytest.mark.parametrize("module", [m for m in MODULES if not within(dotted(m), REDIS_DOOR)],
                         ids=module_id)
def test_only_redis_io_sends_redis_commands(module: Path) -> None:
    """A Redis command is written in ``recovery/redis_io`` (one function per command or
    query, its reply shape in the docstring) and called from there; no other module builds
    a command tuple or calls a client's command method."""
    sends = [f"{module_id(module)}:{function}:{line}: {what}"
             for function, line, what in redis_sends(module.read_text(encoding="utf-8"))
             if f"{module_id(module)}:{function}" not in SENDS_OUTSIDE]
    assert sends == [], "move these sends into recovery/redis_io and call that function"


def test_every_send_left_outside_is_still_there() -> None:
    """SENDS_OUTSIDE names only functions that still send a command themselves."""
    still = set()
    for module in MODULES:
        for function, _, _ in redis_sends(module.read_text(encoding="utf-8")):
            still.add(f"{module_id(module)}:{function}")
    assert set(SENDS_OUTSIDE) <= still


def test_a_whole_run_in_a_test_not_marked_slow_fails_that_test(tmp_path: Path) -> None:
    """The quick tier's rule (tests/support/tier.py): this test is not marked slow, so a whole
    run, in this process or as a spark-submit, fails it before anything starts."""
    from recovery.driver import job
    from tests.support.fault_tools import spark_submit

    with pytest.raises(pytest.fail.Exception, match="not marked slow: mark it"):
        job.run(None, None)  # type: ignore[arg-type]  # refused before it reads either
    with pytest.raises(pytest.fail.Exception, match="spark-submit run of the job"):
        spark_submit([], tmp_path)
