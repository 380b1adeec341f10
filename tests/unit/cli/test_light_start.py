"""A command line that ends before Spark starts (``--help``, ``init``, a bad option, a bad
config) loads no Spark, Arrow, numpy or pandas: the command line, its checks and the job
classes they call import the driver's modules only in the step that runs it. Each case runs
in a fresh interpreter and shows the exit code it ended with, so the refusal is proved to
be the one meant, not an earlier crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fresh_modules import SPARK_STACK, among, loaded_by, run_fresh

# The command's entry modules (the installed script's, ``python -m recovery.jobs.submit``'s)
# and the job classes its checks import before spark-submit.
ENTRY_MODULES = ["recovery.cli.main", "recovery.jobs.submit", "recovery.jobs.recover",
                 "recovery.jobs.dead_letters", "recovery.jobs.redrive"]
# Runs `ARGS` through the command's main, as the installed script does; prints the exit code
# (argparse's --help and its refusals end with SystemExit inside a job's parser).
RUN_MAIN = """
from recovery.cli.main import main
try:
    code = main(ARGS)
except SystemExit as exc:
    code = exc.code
print(f"exit {code}")
"""


def test_the_entry_modules_load_no_spark() -> None:
    """Importing the command and every job class it checks with loads none of the Spark
    stack, nor even redis-py or the settings model (pydantic), whose own imports are a good
    part of a start: they load with the settings."""
    assert among(loaded_by(ENTRY_MODULES), (*SPARK_STACK, "redis", "pydantic")) == []


def test_the_check_sees_a_spark_import() -> None:
    """The rule above can fail: the schemas module imports pyspark and pyarrow (and numpy
    with them), and the check says so."""
    assert among(loaded_by(["recovery.schemas"]), SPARK_STACK) == [
        "numpy", "py4j", "pyarrow", "pyspark"]


@pytest.mark.parametrize(("args", "expected", "told"), [
    (["--help"], 0, ""),
    (["init", "{tmp}/starter", "--with", "all"], 0, ""),
    (["no-such-command"], 2, "unknown command 'no-such-command'"),
    (["run", "--no-such-option"], 2, "unrecognized arguments: --no-such-option"),
    (["redrive", "--no-such-option"], 2, "unrecognized arguments: --no-such-option"),
    (["apply"], 2, "apply needs the dry run's report directory"),
    (["dry-run", "--help"], 0, ""),
    (["dry-run", "--set", "streams.match=o:*", "--set", "claim.min_idle_ms=-1"], 2,
     "claim.min_idle_ms: Input should be greater than or equal to 1"),
    (["dead-letters", "--set", "streams.match=o:*", "--set", "dead_letters.warn_length=0"], 2,
     "dead_letters.warn_length: Input should be greater than or equal to 1"),
    # refused by the settings model as a whole, after every field passed: the names rule
    (["dry-run", "--set", "streams.keys=orders", "--set", "dead_letter.stream={stream}x",
      "--set", "reprocess.mode=requeue", "--set", "reprocess.requeue_stream={stream}x"], 2,
     "requeued copies and dead letters would share it"),
    (["config", "--set", "streams.match=o:*", "--set", "redis.no_such_key=1"], 2,
     "redis.no_such_key: unknown setting"),
], ids=lambda value: " ".join(value)[:40] if isinstance(value, list) else "")
@pytest.mark.slow
def test_a_command_ended_before_spark_loads_no_spark(tmp_path: Path, args: list[str],
                                                     expected: int, told: str) -> None:
    """Run in a directory of its own (no conf/ of the checkout's to read), the command ends
    with the exit code and the error line of its answer or refusal, and the Spark stack was
    never imported."""
    filled = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = run_fresh(RUN_MAIN.replace("ARGS", repr(filled)), cwd=tmp_path)
    assert done.lines[-1] == f"exit {expected}"
    assert told in done.stderr
    assert among(done.modules, SPARK_STACK) == []
    if args[0] in ("--help", "init", "no-such-command", "redrive"):  # no settings read
        assert among(done.modules, ("pydantic", "redis")) == []
    if args[0] == "init":
        assert (tmp_path / "starter" / "conf" / "recovery.toml").is_file()
