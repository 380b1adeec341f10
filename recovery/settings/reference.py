"""The settings reference in the documents, written from the model: each table of settings
in README.md and docs/ is generated from the pydantic fields of
``recovery.settings.model.Settings`` (name, default, constraints, ``description``), so a
document never says other than the model does. Run from the repository's root::

    .venv/bin/python -m recovery.settings.reference        # rewrites the tables in place

A table sits between a begin marker, which names its settings (``all``, or dotted names), and
the end marker::

    <!-- settings: redis.url streams.keys -->
    ...generated...
    <!-- settings end -->

Links in a description are written from the repository's root (``docs/OPERATIONS.md#x``)
and rewritten relative to the document they land in.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path, PurePosixPath

from annotated_types import Ge, Gt, Le, Lt
from pydantic.fields import FieldInfo

from recovery.settings.model import Settings, section_fields

DOCUMENTS = ("README.md", "docs/CONFIGURATION.md", "docs/CLUSTER_TLS.md")
COMMAND = ".venv/bin/python -m recovery.settings.reference"
BLOCK = re.compile(r"(<!-- settings: (?P<names>[^>]*?) -->\n)(?P<body>.*?)(<!-- settings end -->)",
                   re.DOTALL)
LINK = re.compile(r"\]\((?P<target>[^)#:\s]+)(?P<anchor>#[^)\s]*)?\)")
HEADER = "| setting | default | range | meaning |\n|---|---|---|---|\n"


def fields() -> dict[str, FieldInfo]:
    """Every setting, ``section.field`` -> its field, in the model's order (``reprocess``:
    every mode's keys, ``recovery.settings.reprocess.reprocess_fields``)."""
    return {f"{section}.{name}": info for section in Settings.model_fields
            for name, info in section_fields(section).items()}


def default_text(info: FieldInfo) -> str:
    """The default as TOML writes it (``none`` when there is none)."""
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list | dict | str):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def bounds_text(info: FieldInfo) -> str:
    """The numeric constraints, e.g. ``≥ 1, ≤ 10000``; empty when there are none."""
    signs = {Ge: ("≥", "ge"), Gt: (">", "gt"), Le: ("≤", "le"), Lt: ("<", "lt")}
    parts = [f"{sign} {getattr(rule, attr)}" for rule in info.metadata
             for kind, (sign, attr) in signs.items() if isinstance(rule, kind)]
    return ", ".join(parts)


def relative_links(text: str, document: str) -> str:
    """`text`'s root-relative Markdown links made relative to `document` (a root-relative
    path); a link to `document` itself keeps only its anchor."""
    here = PurePosixPath(document)

    def relink(match: re.Match[str]) -> str:
        target, anchor = match["target"], match["anchor"] or ""
        if target == document and anchor:
            return f"]({anchor})"
        return f"]({os.path.relpath(target, here.parent)}{anchor})"

    return LINK.sub(relink, text)


def row(name: str, info: FieldInfo, document: str) -> str:
    """One table row; a field without a description is refused (every setting is told)."""
    if not info.description:
        raise ValueError(f"{name} has no description: give its Field a description= in "
                         "recovery/settings/")
    meaning = relative_links(" ".join(info.description.split()), document).replace("|", "\\|")
    return f"| `{name}` | {default_text(info)} | {bounds_text(info)} | {meaning} |\n"


def table(names: str, document: str) -> str:
    """The table of `names` (``all`` or dotted names, space-separated) for `document`."""
    known = fields()
    chosen = list(known) if names.strip() == "all" else names.split()
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise ValueError(f"{document} lists {', '.join(unknown)}: no such setting; fix the "
                         "names in its <!-- settings: ... --> marker")
    return HEADER + "".join(row(name, known[name], document) for name in chosen)


def regenerate(text: str, document: str) -> str:
    """`text` (the document at root-relative path `document`) with every marked table
    written afresh."""
    return BLOCK.sub(lambda m: m[1] + table(m["names"], document) + m[4], text)


def main(argv: list[str] | None = None) -> int:
    """Rewrite the tables of the documents named (default: DOCUMENTS), paths relative to the
    repository's root, which is the current directory. Prints each file it changed."""
    for document in argv if argv is not None else sys.argv[1:] or list(DOCUMENTS):
        path = Path(document)
        text = path.read_text(encoding="utf-8")
        fresh = regenerate(text, document)
        if fresh != text:
            path.write_text(fresh, encoding="utf-8")
            print(f"rewrote {document}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
