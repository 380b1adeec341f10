"""Links from a job's summary to the dead-letter console (``redis-stream-recovery
console``): with ``dead_letter.console_url`` set, the JSON summary's ``console_links`` maps
each dead-letter stream the run wrote to (the dead-letter job: each it read letters from) to
the console's page for it, ``<console_url>/streams/<name, percent-encoded>``
(:mod:`recovery.console.links` serves it), and the log names each under the summary table.
Imports nothing heavy (the console's route imports ``stream_path`` from here)."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote


def stream_path(name: str) -> str:
    """The console's path of the stream called `name` (percent-encoded: any key works)."""
    return "/streams/" + quote(name, safe="")


def console_links(base: str | None, keys: Iterable[str]) -> dict[str, str]:
    """Dead-letter stream -> its console URL, for each of `keys` (sorted); ``{}`` when no
    console URL is configured."""
    if not base:
        return {}
    return {key: base + stream_path(key) for key in sorted(set(keys))}


def link_lines(links: dict[str, str]) -> list[str]:
    """The log lines under a summary table naming each dead-letter stream's console page."""
    return [f"dead letters of {key} in the console: {url}" for key, url in links.items()]
