"""Command line of the dead-letter console (``redis-stream-recovery console``): a web page over
the dead-letter streams the config selects, reading Redis directly (no Spark).

    redis-stream-recovery console --config conf/recovery.toml [--host 127.0.0.1] [--port 8765]

Logins come from the environment or a file, never the config file
(:mod:`recovery.console.users`). Exit codes as the jobs': 0 after a clean stop, 2 a bad config,
option or users definition (before anything listens), 1 anything else (Redis unreachable or
refusing the login). Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from recovery.console.audit import DEFAULT_AUDIT_STREAM
from recovery.console.serve import ServeOptions, console_state, serve
from recovery.console.users import load_users
from recovery.jobs.job_command import exit_code_of
from recovery.jobs.job_options import (
    ArgumentParser,
    BadArguments,
    OnlyOnce,
    loaded_settings,
    log_level,
    setup_logging,
)


def console_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="redis-stream-recovery console", description=__doc__)
    parser.add_argument("--config", type=Path, action=OnlyOnce,
                        help="TOML config file (see conf/recovery.toml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.FIELD=VALUE", help="override one setting (repeatable)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    parser.add_argument("--users-file", type=Path, action=OnlyOnce,
                        help="file of console users, lines name:role:secret (else "
                             "RECOVERY_CONSOLE_USERS_FILE, RECOVERY_CONSOLE_USERS, "
                             "RECOVERY_CONSOLE_TOKEN, RECOVERY_CONSOLE_READ_TOKEN)")
    parser.add_argument("--audit-stream", default=DEFAULT_AUDIT_STREAM,
                        help=f"stream the console records its actions in "
                             f"(default {DEFAULT_AUDIT_STREAM})")
    parser.add_argument("--rate", type=float, default=None, metavar="LETTERS_PER_S",
                        help="cap on letters a redrive moves per second (default "
                             "redrive.max_entries_per_s, else none)")
    parser.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", type=Path, help="... and this private key")
    parser.add_argument("--log-level", default="INFO", type=log_level, metavar="LEVEL")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective settings (secrets masked) and exit")
    return parser


def options_of(args: argparse.Namespace) -> ServeOptions:
    """The listening options; a pair that cannot be honoured is refused (exit 2)."""
    if not 0 < args.port < 65536:
        raise BadArguments(f"--port {args.port} is no TCP port: give 1-65535")
    if args.rate is not None and not args.rate > 0:
        raise BadArguments(f"--rate {args.rate}: give letters per second above 0")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise BadArguments("--tls-cert and --tls-key go together: give both or neither")
    if not args.audit_stream:
        raise BadArguments("--audit-stream is empty: name the stream for the audit log")
    return ServeOptions(args.host, args.port, args.audit_stream, args.rate, args.tls_cert,
                        args.tls_key)


def console_main(argv: list[str] | None = None) -> int:
    """Parse, check, serve until stopped; return the exit code."""

    def body() -> None:
        args = console_parser().parse_args(argv)
        setup_logging(args.log_level)
        options = options_of(args)
        settings = loaded_settings(args)
        if settings is None:  # --print-config
            return
        users = load_users(users_file=args.users_file)
        state = console_state(settings, users, options)
        try:
            serve(state, options)
        finally:
            state.close()

    return exit_code_of(body, "console")
