"""Warm the JVM up for the run's Spark work while the driver discovers the units.

A run's first Spark query on a fresh JVM pays for the JVM's own start before any entry is
claimed: building the units' DataFrame through py4j (~1.1 s), then planning, generating
code for and running the pass's query before its Python workers even start (~1.2 s more),
measured at 10,000 units on two cores (docs/PERFORMANCE.md). Discovery and the group health
need no Spark: they are the driver's Redis reads. So a run first starts, in a thread, a
small query of the units' own shape (``units_of_parts`` of two dummy units, collected: no
Python worker starts), and builds its units' DataFrame once that query is done: the frame
and the pass then run on a warm JVM. It pays where the driver's reads take long: at 100,000
streams (discovery ~7 s) five runs took 0.8-6.3 s less end to end; at 10,000 (under 1 s of
reads) the time only moves from the pass to before it.

Once per Spark application: a session that already ran it (a notebook's, the tests') skips
it, and so does a Spark Connect session (its JVM is the server's). The warm-up touches no
Redis and its failure is not the run's (the run's own Spark work reports its own errors). A
run that ends before its Spark work cancels it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from pyspark.sql import DataFrame, SparkSession

from recovery.spark.session import spark_context
from recovery.spark.transforms import units_of_parts

log = logging.getLogger(__name__)

JOB_GROUP = "recovery-warm-up"
_WARMED: set[str] = set()  # the Spark applications a warm-up was started in (application ids)


def dummy_units(spark: SparkSession) -> DataFrame:
    """The warm-up query: two dummy units (part 0 and part 1) in the units' own shape."""
    return units_of_parts(spark, [[{"stream": "", "group": "", "consumer": "", "part": part}]
                                  for part in range(2)])


class WarmUp:
    """The warm-up query (`query`, built in the thread: even building it costs a cold JVM
    about a second), run in a thread of its own from construction: :meth:`wait` for it or
    :meth:`cancel` it. ``rows`` holds what it collected once it ran; ``error`` what stopped
    it, if anything."""

    def __init__(self, spark: SparkSession,
                 query: Callable[[SparkSession], DataFrame] = dummy_units) -> None:
        self.rows: list[dict[str, object]] = []
        self.error: Exception | None = None
        self._spark, self._query = spark, query
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recovery-warm-up", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        context = self._spark.sparkContext
        context.setJobGroup(JOB_GROUP, "warm the JVM up for the run", interruptOnCancel=True)
        try:
            frame = self._query(self._spark)
            if not self._cancelled.is_set():
                self.rows = [row.asDict() for row in frame.collect()]
        except Exception as exc:  # not the run's failure: its own Spark work reports its own
            self.error = exc
            log.debug("the warm-up did not run: %s", exc)

    def wait(self) -> None:
        """Block until the warm-up has ended (ran, failed or was cancelled)."""
        self._thread.join()

    def cancel(self) -> None:
        """Cancel the query (not started yet: it will not start; running: its job group is
        cancelled), and wait for its thread."""
        self._cancelled.set()
        if self._thread.is_alive():
            self._spark.sparkContext.cancelJobGroup(JOB_GROUP)
        self._thread.join()


@contextlib.contextmanager
def warming_up(spark: SparkSession, warmed: set[str] = _WARMED) -> Iterator[WarmUp | None]:
    """A WarmUp started for the duration (None when this Spark application is in `warmed`,
    the applications already warmed up, or under Spark Connect, whose JVM is the server's;
    it is added); on the way out it is cancelled if still running (call
    :meth:`WarmUp.wait` where the run's Spark work starts)."""
    application = _application(spark)
    if application is None or application in warmed:
        yield None
        return
    warmed.add(application)
    warm = WarmUp(spark)
    try:
        yield warm
    finally:
        warm.cancel()


def _application(spark: SparkSession) -> str | None:
    """The Spark application's id; None under Spark Connect (no SparkContext on this side)."""
    context = spark_context(spark)
    return None if context is None else str(context.applicationId)
