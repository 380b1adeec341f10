"""``redis-stream-recovery init [DIR]``: the starter files a new user begins from, written
where they want them. The files are the checkout's own (``conf/recovery.toml``,
``conf/alerts.yml``, ``conf/grafana-dashboard.json``, ``dags/redis_stream_recovery.py``),
carried as package data of this package: symbolic links in the checkout, so the wheel holds
copies made at build time and there is no second copy to drift.

Each file lands in DIR at the path it has in the checkout (``DIR/conf/recovery.toml``, ...),
so the paths that errors, help texts and the DAG's defaults name (``conf/recovery.toml``,
``<recovery_app_dir>/conf/recovery.toml``) are the user's. Nothing is overwritten without
``--force``, and nothing is written partly: every file is first written beside its target
under a temporary name, then each is linked into place (a hard link: refused, not replaced,
when the target appeared meanwhile; where the file system has no hard links, a file created
exclusively); any failure removes what this call wrote.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from recovery.errors import ConfigError, RecoveryError


@dataclass(frozen=True)
class StarterFile:
    """One file ``init`` can write: its package resource and its path under DIR."""

    kind: str  # the --with name ("config" is always written)
    resource: str  # file name in this package
    path: str  # relative to DIR, as in the checkout


STARTER_FILES = (
    StarterFile("config", "recovery.toml", "conf/recovery.toml"),
    StarterFile("alerts", "alerts.yml", "conf/alerts.yml"),
    StarterFile("dashboard", "grafana-dashboard.json", "conf/grafana-dashboard.json"),
    StarterFile("dag", "redis_stream_recovery.dag", "dags/redis_stream_recovery.py"),
)
# link(2)'s errors where the file system has no hard links: a new file is created exclusively
NO_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)
OPTIONAL = tuple(f.kind for f in STARTER_FILES if f.kind != "config")


class StarterFileExists(ConfigError):
    """A file ``init`` would write exists and ``--force`` was not given (exit 2)."""


class StarterWriteError(RecoveryError):
    """A starter file could not be written (exit 1); nothing of this call is left."""


def chosen_files(kinds: list[str]) -> list[StarterFile]:
    """The config file and the optional files named in `kinds` (``alerts``, ``dashboard``,
    ``dag``; ``all``: every one). Raises ConfigError naming the valid names."""
    unknown = sorted(set(kinds) - {*OPTIONAL, "all"})
    if unknown:
        raise ConfigError(f"--with {','.join(unknown)}: unknown; use any of "
                          f"{','.join(OPTIONAL)} or all")
    wanted = set(OPTIONAL) if "all" in kinds else set(kinds)
    return [f for f in STARTER_FILES if f.kind == "config" or f.kind in wanted]


def starter_text(resource: str) -> bytes:
    """The bytes of the shipped starter file `resource` (a name of STARTER_FILES).
    StarterWriteError when they are a symbolic link's text: a build from a checkout
    without symbolic links (git's ``core.symlinks=false``) ships those."""
    data = (resources.files(__name__) / resource).read_bytes()
    if data.startswith(b"../") and b"\n" not in data:
        raise StarterWriteError(f"the installed starter file {resource} holds only the symbolic "
                                f"link text {data.decode(errors='replace')!r}: it was built "
                                "from a checkout without symbolic links (git core.symlinks="
                                "false); nothing written: install a released wheel, or build "
                                "from a checkout with symbolic links")
    return data


def write_starter_files(directory: Path, files: list[StarterFile], force: bool) -> list[Path]:
    """Write `files` under `directory` (made if missing); returns their paths. Without
    `force` an existing target refuses the whole call (StarterFileExists, nothing written);
    with it, targets are replaced. All or nothing: StarterWriteError when a file cannot be
    written, the files this call created removed again (with `force`, a target already
    replaced keeps the starter text: it was to be overwritten)."""
    targets = [directory / f.path for f in files]
    existing = [str(t) for t in targets if t.exists() or t.is_symlink()]
    if existing and not force:
        raise StarterFileExists(f"{', '.join(existing)} already exist{'s' * (len(existing) == 1)}"
                                ": nothing written; pick an empty directory, or add --force "
                                "to overwrite")
    in_the_way = [str(t) for t in targets if t.is_dir() and not t.is_symlink()]
    if in_the_way:  # a rename cannot replace it: found before anything is replaced
        raise StarterWriteError(f"{', '.join(in_the_way)}: a directory where a starter file "
                                "goes; nothing written: move it away or pick another DIR")
    texts = [starter_text(f.resource) for f in files]  # each checked before any write
    made = _missing_directories([t.parent for t in targets])  # removed again on a failure
    temporaries: list[Path] = []
    created: list[Path] = []  # targets this call made (not replaced): undone on a failure
    try:
        for text, target in zip(texts, targets, strict=True):
            target.parent.mkdir(parents=True, exist_ok=True)
            temporaries.append(target.with_name(f".{target.name}.init-{secrets.token_hex(4)}"))
            temporaries[-1].write_bytes(text)
        for temporary, target in zip(temporaries, targets, strict=True):
            new = not (target.exists() or target.is_symlink())
            _place(temporary, target, force)
            created += [target] if new else []
    except (OSError, StarterFileExists) as exc:
        _undo([*temporaries, *created], made)
        if isinstance(exc, StarterFileExists):
            raise
        raise StarterWriteError(f"cannot write the starter files under {directory}: {exc}; "
                                "nothing written: pick a directory you can write") from None
    _remove(temporaries)  # each linked into place (or, with force, already moved)
    return targets


def _place(temporary: Path, target: Path, force: bool) -> None:
    """Move `temporary` to `target`: replacing it with `force`, else a hard link that fails
    when `target` exists (it appeared after the check)."""
    if force:
        os.replace(temporary, target)
        return
    try:
        try:
            os.link(temporary, target)
        except OSError as exc:  # FAT, VirtualBox shared folders, some shares: no hard links
            if isinstance(exc, FileExistsError) or exc.errno not in NO_LINKS:
                raise
            _create_exclusively(target, temporary.read_bytes())
    except FileExistsError:
        raise StarterFileExists(f"{target} appeared while writing: nothing written; add "
                                "--force to overwrite") from None


def _create_exclusively(target: Path, data: bytes) -> None:
    """Write `data` to a new file `target` (FileExistsError when it exists); a failed write
    removes it again."""
    with open(target, "xb") as out:
        try:
            out.write(data)
            out.flush()
        except OSError:
            target.unlink()
            raise


def _missing_directories(directories: list[Path]) -> list[Path]:
    """The directories (and their parents) of `directories` that do not exist yet, deepest
    first."""
    missing: set[Path] = set()
    for directory in directories:
        while not directory.exists() and directory != directory.parent:
            missing.add(directory)
            directory = directory.parent
    return sorted(missing, key=lambda d: len(d.parts), reverse=True)


def _undo(files: list[Path], made: list[Path]) -> None:
    """Remove `files` (what this call created), then the directories it made (when empty)."""
    _remove(files)
    for directory in made:
        with contextlib.suppress(OSError):
            directory.rmdir()


def _remove(paths: list[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()
