"""``redis-stream-recovery init [DIR] [--with alerts,dashboard,dag|all] [--force]``: write
the commented config (``DIR/conf/recovery.toml``, the checkout's own) and, on request, the
alert rules (``conf/alerts.yml``), the Grafana dashboard (``conf/grafana-dashboard.json``)
and the Airflow DAG file (``dags/redis_stream_recovery.py``) into DIR (default: the working
directory). No Spark, no Redis.

Exit codes: 0 written; 2 a file exists (without ``--force``) or an unknown ``--with`` name,
nothing written; 1 a file could not be written, nothing of this call left. One line per file
written, then the JSON line ``{"status": "ok", "written": [...]}``; a refusal is one
``error:`` line on stderr and the JSON error line.
"""

from __future__ import annotations

import json
from pathlib import Path

from recovery.jobs.job_command import exit_code_of
from recovery.jobs.job_options import ArgumentParser, OnlyOnce
from recovery.starter import OPTIONAL, chosen_files, write_starter_files


def init_main(args: list[str]) -> int:
    """Parse `args` (what follows ``init``), write the chosen files; the exit code."""
    return exit_code_of(lambda: _init(args), "init")


def _init(args: list[str]) -> None:
    parser = ArgumentParser(prog="redis-stream-recovery init", description=__doc__)
    parser.add_argument("directory", nargs="?", type=Path, default=Path("."), metavar="DIR",
                        help="where to write (made if missing; default: here)")
    parser.add_argument("--with", dest="kinds", action=OnlyOnce, metavar="NAMES",
                        help=f"also write these, comma separated: {','.join(OPTIONAL)} or all")
    parser.add_argument("--force", action="store_true",
                        help="overwrite files that exist (default: refuse, write nothing)")
    parsed = parser.parse_args(args)
    kinds = [k.strip() for k in (parsed.kinds or "").split(",") if k.strip()]
    written = write_starter_files(parsed.directory, chosen_files(kinds), parsed.force)
    for path in written:
        print(f"wrote {path}")
    print(json.dumps({"status": "ok", "written": [str(p) for p in written]}), flush=True)
