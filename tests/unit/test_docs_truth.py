"""Words that stay true: every dotted ``recovery.…`` name written in the code, the docs and the
config files resolves to a module or an attribute; every relative Markdown link (and its
``#anchor``) resolves; every ``tests/...`` path written exists; every setting of the model is
named in docs/CONFIGURATION.md, and every settings table in the documents is what
``recovery.settings.reference`` writes from the model's field descriptions.

Each check reads the files as they are, so a rename that forgets a mention fails here."""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import pytest

from recovery.settings import reference
from recovery.settings.model import Settings, section_fields

ROOT = Path(__file__).resolve().parents[2]
TEXT_GLOBS = ("recovery/**/*.py", "jobs/*.py", "dags/*.py", "docs/*.md", "README.md",
              "conf/*", "notebooks/*.ipynb", "Makefile", "pyproject.toml")
DOTTED = re.compile(r"(?<![\w./-])recovery(?:\.[A-Za-z_]\w*)+")
FILE_SUFFIXES = {"toml", "ipynb", "py", "md", "yml", "yaml", "json", "jsa", "log"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _texts() -> list[Path]:
    return sorted({p for g in TEXT_GLOBS for p in ROOT.glob(g) if p.is_file()})


def _resolves(dotted: str) -> bool:
    """Whether the longest importable prefix of `dotted` has the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _dotted_names() -> list[tuple[str, str]]:
    found = {}
    for path in _texts():
        for match in DOTTED.finditer(path.read_text(errors="replace")):
            name = match.group(0)
            if name.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                continue
            found.setdefault(name, str(path.relative_to(ROOT)))
    return sorted(found.items())


def test_every_dotted_name_resolves() -> None:
    unresolved = [f"{name} ({where})" for name, where in _dotted_names() if not _resolves(name)]
    assert not unresolved, "names that no longer exist: " + ", ".join(unresolved)


# A test file or folder written in the code, the docs and the config files: ``tests/unit/``,
# ``tests/integration/test_cli.py`` (``tests/unit/test_<module>.py`` names the folder only).
TEST_PATH = re.compile(
    r"(?<![\w./-])tests/(?:(?:[\w-]+/)*[\w-]+\.(?:py|yml|txt|json)\b|(?:[\w-]+/)+)")


def test_every_test_path_written_exists() -> None:
    """A test moved or split leaves no mention of its old place behind."""
    missing = sorted({f"{m.group(0)} ({path.relative_to(ROOT)})" for path in _texts()
                      for m in TEST_PATH.finditer(path.read_text(errors="replace"))
                      if not (ROOT / m.group(0)).exists()})
    assert not missing, "no such test file or folder: " + ", ".join(missing)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """The anchors of `path`'s headings (lines in fenced code blocks are no headings)."""
    anchors, fenced = set(), False
    for line in path.read_text().splitlines():
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            anchors.add(_anchor(line.lstrip("#")))
    return anchors


def _markdown() -> list[Path]:
    """The project's Markdown files: those git tracks (never a venv's or a server's)."""
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    return sorted(ROOT / name for name in listed)


def _links() -> list[tuple[Path, str]]:
    return [(path, target) for path in _markdown()
            for target in LINK.findall(path.read_text())
            if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize(("doc", "target"), [(str(p.relative_to(ROOT)), t) for p, t in _links()])
def test_every_relative_link_resolves(doc: str, target: str) -> None:
    file_part, _, anchor = target.partition("#")
    source = ROOT / doc
    linked = (source.parent / file_part).resolve() if file_part else source
    assert linked.exists(), f"{doc} links to {target}: no such file"
    if anchor and linked.suffix == ".md":
        assert anchor in _anchors(linked), f"{doc} links to {target}: no such heading"


def _setting_names() -> list[str]:
    """Every setting the model has, each mode's keys of ``[reprocess]`` included."""
    return [f"{section}.{name}" for section in Settings.model_fields
            for name in section_fields(section)]


def test_every_setting_is_documented() -> None:
    text = (ROOT / "docs/CONFIGURATION.md").read_text()
    missing = [name for name in _setting_names() if name not in text]
    assert not missing, "settings docs/CONFIGURATION.md does not name: " + ", ".join(missing)


@pytest.mark.parametrize("document", reference.DOCUMENTS)
def test_the_settings_tables_are_written_from_the_model(document: str) -> None:
    """Each table between ``<!-- settings: ... -->`` markers is the generator's output: a
    description, default or range changed in recovery/settings/ fails here until rewritten."""
    text = (ROOT / document).read_text(encoding="utf-8")
    assert reference.BLOCK.search(text), f"{document} has no <!-- settings: ... --> table"
    assert text == reference.regenerate(text, document), (
        f"{document}'s settings table differs from the model's field descriptions: run "
        f"`{reference.COMMAND}` from the repository's root and commit the result")


def test_every_settings_table_is_checked() -> None:
    """A table marked in a document the generator does not rewrite would drift unseen."""
    marked = {str(path.relative_to(ROOT)) for path in _markdown()
              if reference.BLOCK.search(path.read_text(encoding="utf-8"))}
    assert marked <= set(reference.DOCUMENTS), (
        "settings tables outside recovery.settings.reference.DOCUMENTS: " + ", ".join(
            sorted(marked - set(reference.DOCUMENTS))))


def test_docs_configuration_tables_every_setting() -> None:
    text = (ROOT / "docs/CONFIGURATION.md").read_text(encoding="utf-8")
    assert "<!-- settings: all -->" in text
