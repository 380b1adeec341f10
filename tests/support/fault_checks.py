"""What must hold after any fault, then a run that finished (the fault trials of
tests/integration/faults/): each entry's place in Redis fits its kind, and the reports,
the dead-letter metadata and the handler's record together account for every entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from redis import Redis

from tests.support.backlogs import DEAD
from tests.support.fault_tools import (
    KINDS,
    REJECTED_KIND,
    WAITING_KIND,
    Key,
    dead_letter_index,
    handed_over,
    job_args,
    report_rows,
    rows_by_key,
    run_in_process,
)
from tests.support.invariants import final_states, pel

SMALL_BATCHES = "spark.sql.execution.arrow.maxRecordsPerBatch=20"
TRIAL_KINDS = {**KINDS, **REJECTED_KIND}  # what the kill and task-failure trials seed
PER_STREAM = {kind: count for kind, (count, _) in TRIAL_KINDS.items()}


def check_states(client: Redis, seeded: dict[Key, str], last_run: str) -> dict[Key, str]:
    """Each entry's place in Redis fits its kind; returns the states."""
    states = final_states(client, seeded)  # also: never dead-lettered twice, never both
    handed = handed_over(client)
    for key, kind in seeded.items():
        state = states[key]
        if kind == "ok":
            assert state == "acked" and handed[key] >= 1, (key, state, handed[key])
        elif kind in ("poison", "fail_at_limit", "rejected"):
            assert state == "dead_lettered", (key, kind, state)
            assert kind != "rejected" or handed[key] >= 1, (key, "rejected unhandled")
        elif kind == "fail":
            assert state.startswith(f"pending:recovery-{last_run}-"), (key, state)
        elif kind == "deleted":
            assert state == "acked", (key, state)  # gone from the PEL, not in the DLQ
        elif kind == "waiting":  # not due under the schedule: left to its owner as it was
            assert state == f"pending:{DEAD}", (key, state)
            assert pel(client, key[0], key[1])[key[2]].delivery_count == WAITING_KIND[kind][1]
        if kind in ("poison", "deleted", "waiting"):
            assert handed[key] == 0, f"{key} ({kind}) was handed to the handler"
    return states


def check_accounting(client: Redis, seeded: dict[Key, str], states: dict[Key, str],
                     reports: dict[str, list[dict[str, Any]]], unreported_ok: set[str]
                     ) -> dict[str, int]:
    """The readable reports, the dead-letter metadata and the handler's record together
    account for every entry; no report row contradicts Redis.

    `unreported_ok`: runs whose report may be missing rows (killed or failed runs: Spark
    commits a report only when the run succeeds). Returns counts of how entries are
    accounted for.
    """
    letters = dead_letter_index(client, {k[0] for k in seeded})
    handed = handed_over(client)
    index = {run: rows_by_key(rows) for run, rows in reports.items()}
    tally: dict[str, int] = {}
    for key, kind in seeded.items():
        rows = [(run, r) for run, by_key in index.items() for r in by_key.get(key, [])]
        for run in reports:
            assert len(index[run].get(key, [])) <= 1, f"{run} reported {key} twice"
        how = account_for(key, kind, states[key], rows, letters, handed, unreported_ok)
        tally[how] = tally.get(how, 0) + 1
    return tally


def account_for(key: Key, kind: str, state: str, rows: list[tuple[str, dict[str, Any]]],
             letters: dict[Key, tuple[str, dict]], handed: Any, unreported_ok: set[str]) -> str:
    actions = {r["action"] for _, r in rows}
    for run, row in rows:  # what a report says happened did happen
        if row["action"] == "reprocessed":
            assert state == "acked", (key, run, state)
        elif row["action"] == "dead_lettered":
            assert letters[key][0] == row["dead_letter_id"], (key, run)
        elif row["action"] == "deleted":
            assert kind == "deleted", (key, run, kind)
    if kind == "waiting":
        assert not rows, (key, "not due, yet reported", rows)
        return "not due, left pending"
    if kind == "deleted":
        # A killed or failed attempt whose XAUTOCLAIM (7.0+) dropped the entry from the PEL
        # took the only evidence with it: a later run cannot report it (known limitation).
        return "reported deleted" if actions == {"deleted"} else "deleted, unreported"
    if state == "dead_lettered":
        run = letters[key][1][b"x-run-id"].decode()
        reason = letters[key][1][b"x-death-reason"]
        assert (reason == b"handler-rejected") == (kind == "rejected"), (key, kind, reason)
        if "dead_lettered" in actions:
            return "reported dead-lettered"
        # An earlier attempt of a retried task moved it; the attempt that counts found it
        # gone. Or a run without a committed report moved it: the dead letter names it.
        if any(r["action"] == "skipped" for r_run, r in rows if r_run == run):
            return "dead-lettered by an earlier task attempt, reported skipped"
        assert run in unreported_ok, f"{key} dead-lettered by {run}, unreported"
        return "dead letter names its unreported run"
    if state == "acked":
        if "reprocessed" in actions:
            return "reported reprocessed"
        # Acked by an earlier task attempt (the retry reports it skipped), or by a run
        # without a committed report; either way only after the handler had it.
        assert handed[key] >= 1, f"{key} acked but never handed over"
        if "skipped" in actions:
            return "acked by an earlier task attempt, reported skipped"
        assert unreported_ok, (key, actions)
        return "acked by an unreported run (handler record)"
    assert "failed" in actions, (key, state, actions)
    return "reported failed, still pending"


def rerun_and_account(spark: SparkSession, url: str, base: Path, streams: list[str],
                      seeded: dict[Key, str], min_idle_ms: int, first: tuple[str, bool],
                      rerun_id: str) -> dict[str, list[dict[str, Any]]]:
    """Run again in-process (claiming what is idle for `min_idle_ms`), which must finish;
    then Redis, the handler's record and the reports of both runs must account for every
    entry. `first`: the earlier run's id and whether its report may be missing rows.
    Returns the reports that could be read."""
    rerun = run_in_process(spark, job_args(url, base, streams, f"claim.min_idle_ms={min_idle_ms}",
                                           run_id=rerun_id))
    assert rerun.code == 0, rerun.stderr
    client = Redis.from_url(url)
    states = check_states(client, seeded, rerun_id)
    reports = {r: rows for r in (first[0], rerun_id)
               if (rows := report_rows(spark, base, r)) is not None}
    check_accounting(client, seeded, states, reports, {first[0]} if first[1] else set())
    client.close()
    return reports


def side_effect_totals(streams: list[str]) -> tuple[int, int, int]:
    """(entries due to claim, hand-overs, dead letters) a finished run of `streams` makes."""
    claimable = sum(n for k, n in PER_STREAM.items() if k != "deleted") * len(streams)
    handed = sum(PER_STREAM[k] for k in ("ok", "fail", "fail_at_limit", "rejected")) * len(streams)
    letters = sum(PER_STREAM[k] for k in ("poison", "fail_at_limit", "rejected")) * len(streams)
    return claimable, handed, letters
