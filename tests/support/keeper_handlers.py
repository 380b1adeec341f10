"""Attack handler of tests/integration/attacks/test_attack_keeper_edges.py (imported on
executors as ``tests.support.keeper_handlers:hangs_on_file``), steered by the control file of
``tests.support.fault_tools.write_control``. It records as
``tests.support.order_handler:in_order`` does (``SEEN`` / ``DONE`` + key).

- ``hangs_on_file``: the first call holding an ID of the control's ``hang_ids`` (a marker
  file ``started-<id>`` in the control's ``hang_dir``, O_EXCL: once per ID) records its IDs on
  ``SEEN``, then waits, without touching Redis, until the file ``release`` exists in
  ``hang_dir`` (writing a beat count to ``beat-<id>`` every 20 ms meanwhile, so a test sees
  the abandoned thread is alive while Redis is away or restarted), then records its success
  on ``DONE`` (its side effect, done late) and writes ``finished-<id>``. Every other call is
  ``in_order``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from recovery.handlers import Message, Result
from tests.support.handlers import _client, _control
from tests.support.order_handler import DONE, SEEN, in_order, key_of

HANG_LIMIT_S = 120.0  # the longest a hung call waits for its release (a test that forgot it)


def beats(hang_dir: Path, entry_id: str) -> int:
    """How often the hung call on `entry_id` has beaten so far (0: not started)."""
    try:
        return int((hang_dir / f"beat-{entry_id}").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _first(hang_dir: Path, entry_id: str) -> bool:
    try:
        os.close(os.open(hang_dir / f"started-{entry_id}", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def hangs_on_file(messages: list[Message]) -> list[Result]:
    control = _control()
    hang_dir = Path(control["hang_dir"])
    hang = set(control.get("hang_ids", []))
    first = [m for m in messages if m.id in hang and _first(hang_dir, m.id)]
    if not first:
        return in_order(messages)
    client = _client(control["url"])
    for m in messages:
        client.rpush(SEEN + key_of(m), m.id)
    deadline = time.monotonic() + HANG_LIMIT_S
    count = 0
    while not (hang_dir / "release").exists() and time.monotonic() < deadline:
        count += 1
        for m in first:
            tmp = hang_dir / f"beat-{m.id}.tmp"
            tmp.write_text(str(count))
            tmp.replace(hang_dir / f"beat-{m.id}")
        time.sleep(0.02)
    for m in messages:  # the dependency answered at last: the side effect is done
        client.rpush(DONE + key_of(m), m.id)
    for m in first:
        (hang_dir / f"finished-{m.id}").write_text("1")
    return [Result.success()] * len(messages)
