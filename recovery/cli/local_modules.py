"""A handler module in the working directory, shipped for the user by the installed command.

``handler.path = "myhandlers:handle"`` with ``./myhandlers.py`` imports in a Python started
here, but not on Spark's driver (its path starts at the job file's directory) nor on the
executors. So before spark-submit, ``redis-stream-recovery run | dry-run | apply`` looks up
the top-level module of ``handler.path`` and of each ``handler.dead_letter_exceptions``
class: one that the driver's path does not have, found as a single file ``<name>.py`` in the
working directory, is added to spark-submit's ``--py-files`` (after the user's own, whether
given as ``--py-files`` or ``spark.submit.pyFiles``; not when those list a file of its
name, by any path: spark-submit refuses two), which puts it on the driver's and the
executors' path, and one stderr line says so (refused, exit 2, when its path has a comma:
spark-submit splits ``--py-files`` on commas). A package (a directory) is not shipped this
way: the handler's "does not import" error names the ways (a wheel installed where Spark
runs, or ``--py-files`` with a ``.zip`` of it; README, "Handlers and re-processing").
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path

from recovery.cli.precheck import answered_by_the_job, spark_conf, spark_option
from recovery.cli.routes import JOBS_DIR
from recovery.errors import ConfigError

HANDLER_COMMANDS = ("run", "dry-run", "apply")


def handler_modules(job_args: list[str]) -> list[str]:
    """The top-level module names of ``handler.path`` and ``handler.dead_letter_exceptions``
    in the settings `job_args` (the job file's arguments) name; [] when they do not parse or
    load (the checks that follow refuse them, naming the problem)."""
    from recovery.settings.model import load_settings  # pydantic: not for init or config

    parser = _QuietParser(add_help=False)  # abbreviations, as the job takes them
    parser.add_argument("--config", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    try:
        args, _ = parser.parse_known_args(job_args)
        settings = load_settings(args.config, args.overrides)
    except Exception:  # the precheck and the job report it
        return []
    paths = [settings.handler.path or "", *settings.handler.dead_letter_exceptions]
    names = [p.partition(":")[0].partition(".")[0] for p in paths if p]
    return list(dict.fromkeys(n for n in names if n.isidentifier()))


class _QuietParser(argparse.ArgumentParser):
    """argparse that raises instead of printing: the job's own parser reports bad options."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(message)


def working_directory_modules(names: list[str], cwd: Path) -> list[Path]:
    """Of module `names`, the single ``<name>.py`` files of `cwd` that Python's path without
    the working directory does not find (a module installed, or of the standard library,
    is never shadowed by shipping a file of the same name, nor a package ``<name>/`` of
    `cwd`, which Python here imports instead of the file; a stderr line names a file not
    shipped for that reason). Raises ConfigError for a file named like a job module
    (``recovery/jobs/<name>.py``), which the job's driver imports instead."""
    elsewhere = [p for p in sys.path if p not in ("", ".", str(cwd))]
    found = []
    for name in names:
        candidate = cwd / f"{name}.py"
        if not candidate.is_file() or (cwd / name / "__init__.py").is_file():
            continue  # none, or the package of that name wins here
        if (JOBS_DIR / f"{name}.py").is_file():
            raise ConfigError(
                f"{candidate}: '{name}' is also recovery/jobs/{name}.py, a job module that "
                "spark-submit's driver imports instead (the job file's directory is first "
                "on its path): rename your module and handler.path")
        if name in sys.builtin_module_names or PathFinder.find_spec(name, elsewhere):
            print(f"{candidate} is not shipped: '{name}' is also a module of the standard "
                  "library or installed, which the job imports instead; rename your module "
                  "and handler.path", file=sys.stderr, flush=True)
        else:
            found.append(candidate)
    return found


def with_shipped_modules(command: str, job_args: list[str], spark_args: list[str]
                         ) -> list[str]:
    """`spark_args` with the working directory's handler modules added to ``--py-files``
    (:func:`working_directory_modules`), for the commands that run a handler; unchanged
    otherwise. Says on stderr what it ships."""
    if command not in HANDLER_COMMANDS or any(answered_by_the_job(a) for a in job_args):
        return spark_args
    try:
        cwd = Path(os.getcwd())
    except FileNotFoundError:
        raise ConfigError("the working directory was removed: cd into one that exists (the "
                          "handler's modules are looked up there) and run again") from None
    files = working_directory_modules(handler_modules(job_args), cwd)
    given = spark_option(spark_args, "--py-files")
    if given is None:
        given = spark_conf(spark_args, "spark.submit.pyFiles") or ""
    # spark-submit refuses two entries of one file name (FileAlreadyExistsException): the
    # user's own entry of that name (another path, a link, a URI) wins
    listed = {item.rstrip("/").rpartition("/")[2] for item in given.split(",") if item}
    files = [f for f in files if f.name not in listed]
    if not files:
        return spark_args
    _refuse_commas(files)
    for file in files:
        print(f"shipping {file} to Spark's driver and executors (--py-files): a handler "
              "module of the working directory", file=sys.stderr, flush=True)
    joined = ",".join([*filter(None, given.split(",")), *map(str, files)])
    return [*_without_py_files(spark_args), "--py-files", joined]


def _refuse_commas(files: list[Path]) -> None:
    """ConfigError (exit 2) when a path of `files` has a comma: spark-submit splits
    ``--py-files`` on commas, so such a file cannot be shipped by its path."""
    split = [str(f) for f in files if "," in str(f)]
    if split:
        raise ConfigError(f"{', '.join(split)}: a comma in the path, which spark-submit's "
                          "--py-files splits on: the handler module cannot be shipped from "
                          "here; run from a directory without a comma, or ship it yourself "
                          "(-- --py-files with a .zip of it, or a wheel installed where Spark "
                          "runs)")


def _without_py_files(spark_args: list[str]) -> list[str]:
    """`spark_args` without its ``--py-files`` options (each replaced by the joined one)."""
    kept: list[str] = []
    skip = False
    for arg in spark_args:
        if skip:
            skip = False
        elif arg == "--py-files":
            skip = True
        elif not arg.startswith("--py-files="):
            kept.append(arg)
    return kept
