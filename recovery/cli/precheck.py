"""The installed command's checks before it starts spark-submit (``recovery.cli.main``).

Under spark-submit a config typo costs a JVM start (14-17 s here) and its ``error:`` line
lands on stdout: Spark's PythonRunner merges the job's stderr into its stdout. So the
command first does, in this Python, what the job would do before Spark starts: parse the
job's options, load the settings (file, ``RECOVERY_*``, ``--set``) and, for ``run``,
``dry-run`` and ``apply``, the job's checks that need neither Redis nor Spark
(``recovery.jobs.recover.local_preflight``: the handler and its exception classes import,
the report path is writable, a local plan's terms allow the run), for ``redrive`` its
filters' range and for ``dead-letters`` its report path, as those jobs do before Spark (the
job class's ``check``, ``recovery.jobs.job_command.JobCommand.check``). A
refusal is the job's own: one ``error:`` line on stderr, the JSON error line on stdout, its
exit code (2), and its metrics push (``[metrics]``: the attempt, as the job pushes a refused
run). What passes is checked again by the job. Redis is not contacted here: a run that
cannot reach it is the job's to report (exit 1), metrics push included, as before.

Skipped where this process is not where the driver runs (``--deploy-mode cluster`` or
``spark.submit.deployMode=cluster`` by ``--conf``, ``--properties-file`` or
``spark-defaults.conf``: its files, modules and network are the cluster's) or not the Python
the driver runs (``PYSPARK_DRIVER_PYTHON``, ``PYSPARK_PYTHON`` or their ``spark.pyspark.*``
properties naming another environment's interpreter, or either variable assigned in
``spark-env.sh``: the handler's modules are its), and for
``--help``, ``--version`` and ``--print-config`` (the job answers those itself). A handler
shipped with ``--py-files`` (or ``spark.submit.pyFiles``) is imported from those files, and
the working directory is not on the path (it is not on the driver's), as the driver would.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from recovery.cli.routes import JOBS_DIR, ROUTES

ANSWERED_BY_THE_JOB = ("-h", "--help", "--version", "--print-config")


def precheck(command: str, job_args: list[str], spark_args: list[str]) -> int | None:
    """Check `command`'s job options (as the job file gets them) before spark-submit:
    None when the job may start, else the exit code of the refusal just printed (and pushed
    to ``[metrics]`` as the job would)."""
    if (driver_elsewhere(spark_args) or another_python(spark_args)
            or any(answered_by_the_job(a) for a in job_args)):
        return None
    with tempfile.TemporaryDirectory(prefix="recovery-precheck-") as scratch:
        _as_the_driver_path(spark_args, Path(scratch))
        code = ROUTES[command].job()().check(job_args)  # starts no Spark
    return code or None


def answered_by_the_job(arg: str) -> bool:
    """An option the job answers itself, as argparse reads it: ``--print-conf`` (an
    abbreviation) is ``--print-config``."""
    return arg in ANSWERED_BY_THE_JOB or (
        arg.startswith("--") and len(arg) > 3
        and any(option.startswith(arg) for option in ANSWERED_BY_THE_JOB))


def driver_elsewhere(spark_args: list[str]) -> bool:
    """True for cluster deploy mode (``--deploy-mode cluster``, either spelling, else
    ``spark.submit.deployMode=cluster`` by ``--conf`` or the properties files), where the
    driver is not here."""
    mode = spark_option(spark_args, "--deploy-mode")
    if mode is None:
        mode = spark_conf(spark_args, "spark.submit.deployMode")
    return mode == "cluster"


def another_python(spark_args: list[str]) -> bool:
    """True when the driver runs another Python environment than this one: its modules
    (the handler's) are not this one's. Its interpreter as PythonRunner picks it:
    ``spark.pyspark.driver.python``, ``spark.pyspark.python``, then the variables
    ``PYSPARK_DRIVER_PYTHON``, ``PYSPARK_PYTHON`` (either assigned in ``spark-env.sh``,
    which spark-submit sources over this environment: taken as another, its value unknown
    here); none: this one (the command's default)."""
    chosen = (spark_conf(spark_args, "spark.pyspark.driver.python")
              or spark_conf(spark_args, "spark.pyspark.python"))
    if not chosen and spark_env_sets(("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON")):
        return True
    chosen = chosen or os.environ.get("PYSPARK_DRIVER_PYTHON") or os.environ.get("PYSPARK_PYTHON")
    if not chosen:
        return False
    found = shutil.which(chosen) or chosen
    return Path(os.path.abspath(found)).parent != Path(os.path.abspath(sys.executable)).parent


def spark_option(spark_args: list[str], name: str, aliases: tuple[str, ...] = ()) -> str | None:
    """The last value of spark-submit option `name` (``--name V`` or ``--name=V``), if any."""
    value = None
    for i, arg in enumerate(spark_args):
        if arg in (name, *aliases) and i + 1 < len(spark_args):
            value = spark_args[i + 1]
        elif arg.startswith(f"{name}="):
            value = arg.partition("=")[2]
    return value


def spark_conf(spark_args: list[str], key: str) -> str | None:
    """Spark property `key` as spark-submit will see it: the last ``--conf key=value``
    (``-c``, ``--conf=``), else the properties files' (:func:`_properties`), if any."""
    value = None
    for i, arg in enumerate(spark_args):
        pair = (spark_args[i + 1] if arg in ("--conf", "-c") and i + 1 < len(spark_args)
                else arg.partition("=")[2] if arg.startswith("--conf=") else "")
        k, sep, v = pair.partition("=")
        if sep and k.strip() == key:
            value = v
    return value if value is not None else _properties(spark_args).get(key)


def _properties(spark_args: list[str]) -> dict[str, str]:
    """The Spark properties of ``--properties-file`` and, without it (or with
    ``--load-spark-defaults``), of ``spark-defaults.conf`` (``$SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``, else pip's pyspark's ``conf``), the former winning."""
    chosen = spark_option(spark_args, "--properties-file")
    files = [Path(chosen)] if chosen else []
    if not chosen or "--load-spark-defaults" in spark_args:
        files.append(spark_conf_dir() / "spark-defaults.conf")
    found: dict[str, str] = {}
    for file in reversed(files):  # spark-defaults first, the chosen file over it
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            line = line.strip()
            if line and line[0] not in "#!":
                key, *value = re.split(r"\s*[=:]\s*|\s+", line, maxsplit=1)
                found[key] = value[0].strip() if value else ""
    return found


def spark_conf_dir() -> Path:
    """Spark's conf directory as spark-submit finds it: ``$SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``, else pip's pyspark's ``conf``."""
    return Path(os.environ.get("SPARK_CONF_DIR") or (
        str(Path(os.environ["SPARK_HOME"]) / "conf") if os.environ.get("SPARK_HOME")
        else str(Path(_pyspark_home()) / "conf")))


def spark_env_sets(names: tuple[str, ...]) -> bool:
    """True when ``spark-env.sh`` of :func:`spark_conf_dir`, which spark-submit sources
    before it starts (``load-spark-env.sh``), assigns one of the variables `names` on a line
    that is not a comment (``MASTER=yarn``, ``export PYSPARK_PYTHON=...``). Shell is not
    evaluated: an assignment, conditional or not, counts; an unreadable file counts too."""
    path = spark_conf_dir() / "spark-env.sh"
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # spark-submit may read what this process cannot
    assigned = re.compile(rf"(?<![\w$])(?:{'|'.join(map(re.escape, names))})=")
    return any(assigned.search(line.partition("#")[0]) for line in lines)


def _pyspark_home() -> str:
    """pip's pyspark directory (its spark-submit's SPARK_HOME), or "" without pyspark."""
    spec = importlib.util.find_spec("pyspark")
    return str(Path(spec.origin).parent) if spec and spec.origin else ""


def _as_the_driver_path(spark_args: list[str], scratch: Path) -> None:
    """This process's path as the driver's will be: its first entry the job file's
    directory, not this command's (under ``python -m`` the working directory, which the
    driver does not have), and the local ``--py-files`` (or ``spark.submit.pyFiles``) added
    as spark-submit adds them: a handler shipped that way imports here too (a ``.py`` file
    copied alone to a directory of `scratch`, as spark-submit copies it)."""
    if sys.path and sys.path[0] in ("", os.getcwd(), os.path.dirname(sys.argv[0])):
        sys.path[0] = str(JOBS_DIR)
    files = spark_option(spark_args, "--py-files")
    if files is None:
        files = spark_conf(spark_args, "spark.submit.pyFiles") or ""
    for n, item in enumerate(filter(None, files.split(","))):
        parsed = urlparse(item)
        if parsed.scheme not in ("", "file", "local"):
            continue  # fetched by spark-submit: not readable here
        path = Path(parsed.path if parsed.scheme else item)
        if not path.exists():
            continue
        if path.suffix == ".py":  # copied alone to a directory of its own (SPARK-24384):
            alone = scratch / str(n)  # not its siblings
            alone.mkdir()
            shutil.copy(path, alone / path.name)
            path = alone
        if str(path) not in sys.path:
            sys.path.append(str(path))
