"""Where each claimed entry goes, decided on the executor batch by batch. Pure Arrow, no I/O.

The claimed set crosses Spark packed (``recovery.packing``), so the route is a column added
to each CLAIMED Arrow batch on its way into the hand-over, not a Spark expression.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from recovery.schemas import (
    ROUTE_DEAD_LETTER,
    ROUTE_DELETED,
    ROUTE_GONE,
    ROUTE_HANDLE,
    ROUTED,
    arrow,
)

ROUTED_ARROW = arrow(ROUTED)


def route_batch(batch: pa.RecordBatch, max_deliveries: int) -> pa.RecordBatch:
    """A CLAIMED batch -> the ROUTED batch: the same rows plus `route`, the first that holds
    of: deleted upstream; delivery count unknown (gone from the job's PEL); delivery count
    (after this run's claim) above `max_deliveries` (dead letter); else the handler."""
    count = batch.column("delivery_count")
    conditions = pc.make_struct(
        batch.column("deleted"),
        pc.is_null(count),
        pc.fill_null(pc.greater(count, max_deliveries), False),
        field_names=["deleted", "gone", "over_limit"],
    )
    routes = pc.case_when(conditions, ROUTE_DELETED, ROUTE_GONE, ROUTE_DEAD_LETTER,
                          ROUTE_HANDLE)
    return pa.RecordBatch.from_arrays([*batch.columns, routes.cast(pa.string())],
                                      schema=ROUTED_ARROW)
