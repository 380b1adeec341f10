"""Newer servers than this machine's own, from Debian's packages, for the tests: Redis 8.0
(Debian 13 "trixie"), Valkey 9.1 (Debian unstable "sid") and Redis 8.6 (Debian
"experimental", whose libraries come from "sid": experimental carries only what differs from
it), each run beside the C library of its suite; nothing is installed system-wide.

``python -m recovery.testing.debian_servers`` (``make servers``) sets them up, once: from the
Debian mirror this machine's apt sources name (or ``RECOVERY_DEBIAN_MIRROR``), it reads the
suite's ``InRelease`` (its signature checked with ``gpgv`` against the system's Debian
archive keyring), then ``main/binary-amd64/Packages.xz`` (checked against InRelease's
SHA256), and fetches the server's packages and every library package they depend on
(Section ``libs``, first alternatives, transitively), each checked against the index's
SHA256, over plain HTTP with timeouts. Each is unpacked with ``dpkg -x`` into
``<checkout>/.servers/<flavor>/root``. In Debian the server binary is ``*-check-rdb`` and
``*-server`` a link to it (the binary picks its mode from argv[0]): ``<flavor>/<name>-server``
is a three-line launcher that runs that link through the unpacked
``ld-linux-x86-64.so.2 --library-path <unpacked lib dirs>``. A flavor already set up is left
alone, without the network. Failures are one line, ``error: ...``, exit 1.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
SERVERS_DIR = CHECKOUT / ".servers"  # ignored by git
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
MIRROR_ENV = "RECOVERY_DEBIAN_MIRROR"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
TIMEOUT_S = 30.0  # per connect and per read of one HTTP request
DEADLINE_S = 300.0  # for one whole download
ARCH = "amd64"
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
LOADER = "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
STAMP = ".installed"  # in a flavor's directory: the packages it was made from


class SetupError(RuntimeError):
    """A server could not be set up; the message is the one line to show."""


@dataclass(frozen=True)
class DebianServer:
    """A server flavor taken from a Debian suite: `packages` are the roots (the server and
    the package with its binary), `name` is ``redis`` or ``valkey``, `version` the prefix its
    ``--version`` (``v=8.0.2``) and INFO's `version_field` must show. `libs_suite`, where
    given, is the suite the library packages come from (the roots still from `suite`)."""

    flavor: str
    suite: str
    packages: tuple[str, ...]
    name: str
    version: str
    version_field: str
    libs_suite: str | None = None

    @property
    def directory(self) -> Path:
        return SERVERS_DIR / self.flavor

    @property
    def launcher(self) -> Path:
        return self.directory / f"{self.name}-server"


SERVERS = {s.flavor: s for s in (
    DebianServer("redis80", "trixie", ("redis-server", "redis-tools"), "redis", "8.0.",
                 "redis_version"),
    DebianServer("valkey91", "sid", ("valkey-server", "valkey-tools"), "valkey", "9.1.",
                 "valkey_version"),
    DebianServer("redis86", "experimental", ("redis-server", "redis-tools"), "redis", "8.6.",
                 "redis_version", libs_suite="sid"),
)}


def launcher(flavor: str) -> str | None:
    """The launcher of a flavor set up by ``make servers``; None if it is not (yet)."""
    server = SERVERS[flavor]
    ready = server.launcher.exists() and (server.directory / STAMP).exists()
    return str(server.launcher) if ready else None


def mirror(sources: tuple[Path, ...] = APT_SOURCES) -> str:
    """The Debian archive apt uses here: ``RECOVERY_DEBIAN_MIRROR``, else the first ``deb``
    source (one-line ``.list`` or deb822 ``.sources``) that serves a release itself (a suite
    without ``-security``/``-updates``), e.g. ``http://deb.debian.org/debian``."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV].rstrip("/")
    for uri, suites in _apt_entries(sources):
        if any("-" not in suite for suite in suites):
            return uri.rstrip("/")
    raise SetupError(f"no Debian release source in {', '.join(map(str, sources))}: "
                     f"set {MIRROR_ENV}=http://deb.debian.org/debian")


def _apt_entries(sources: tuple[Path, ...]) -> list[tuple[str, list[str]]]:
    """(URI, suites) of every ``deb`` entry of the apt source files, in apt's order."""
    files: list[Path] = []
    for source in sources:
        files += sorted(source.glob("*")) if source.is_dir() else [source]
    entries: list[tuple[str, list[str]]] = []
    for path in files:
        if path.suffix == ".sources":
            entries += _deb822_entries(path.read_text(errors="replace"))
        elif path.exists() and (path.suffix == ".list" or path.name == "sources.list"):
            entries += _one_line_entries(path.read_text(errors="replace"))
    return entries


def _deb822_entries(text: str) -> list[tuple[str, list[str]]]:
    entries = []
    for stanza in re.split(r"\n\s*\n", text):
        fields = _fields(stanza)
        if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") != "no":
            entries += [(uri, fields.get("Suites", "").split())
                        for uri in fields.get("URIs", "").split()]
    return entries


def _one_line_entries(text: str) -> list[tuple[str, list[str]]]:
    entries = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", " ", line.split("#")[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            entries.append((words[1], [words[2]]))
    return entries


def _fields(stanza: str) -> dict[str, str]:
    """The fields of one deb822 stanza (continuation lines joined, comments dropped)."""
    fields: dict[str, str] = {}
    key = ""
    for line in stanza.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line[0] in " \t" and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def parse_packages(text: str) -> dict[str, dict[str, str]]:
    """A Packages index: package name -> its fields (the first stanza of a name wins)."""
    index: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields = _fields(stanza)
        if "Package" in fields:
            index.setdefault(fields["Package"], fields)
    return index


def needed(index: dict[str, dict[str, str]], roots: tuple[str, ...]) -> list[dict[str, str]]:
    """The stanzas of `roots` and, transitively, of the library packages (Section ``libs``)
    they depend on (Depends, Pre-Depends; the first alternative), roots first."""
    order: list[str] = []
    todo = list(roots)
    while todo:
        name = todo.pop(0)
        if name in order:
            continue
        if name not in index:
            raise SetupError(f"package {name} is not in the index")
        order.append(name)
        for dep in _dependencies(index[name]):
            if index.get(dep, {}).get("Section") == "libs":
                todo.append(dep)
    return [index[name] for name in order]


def _dependencies(fields: dict[str, str]) -> list[str]:
    """Names of the first alternative of each Depends and Pre-Depends item."""
    items = ",".join(fields.get(f, "") for f in ("Pre-Depends", "Depends")).split(",")
    return [re.split(r"[\s(:]", item.split("|")[0].strip())[0] for item in items if item.strip()]


def fetch(url: str) -> bytes:
    """The body of `url` (HTTP GET, TIMEOUT_S per connect and read, DEADLINE_S in all)."""
    deadline = time.monotonic() + DEADLINE_S
    chunks: list[bytes] = []
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:
            while chunk := reply.read(1 << 20):
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not done in {DEADLINE_S:.0f} s")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SetupError(f"cannot fetch {url}: {reason}") from None
    return b"".join(chunks)


def checked(data: bytes, sha256: str, what: str) -> bytes:
    """`data` if its SHA256 is `sha256`, else SetupError naming `what`."""
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SetupError(f"{what}: SHA256 mismatch (a broken download or mirror)")
    return data


def release_index(archive: str, suite: str) -> dict[str, dict[str, str]]:
    """The suite's main/binary-amd64 Packages index, verified through its signed InRelease."""
    release_url = f"{archive}/dists/{suite}/InRelease"
    release = _verified(fetch(release_url), release_url)
    path = f"main/binary-{ARCH}/Packages.xz"
    sums = re.search(rf"^ ([0-9a-f]{{64}})\s+\d+\s+{re.escape(path)}$",
                     release.split("SHA256:", 1)[-1], re.M)
    if sums is None:
        raise SetupError(f"{release_url} lists no SHA256 of {path}")
    url = f"{archive}/dists/{suite}/{path}"
    return parse_packages(lzma.decompress(checked(fetch(url), sums.group(1), url)).decode())


def server_index(archive: str, server: DebianServer) -> dict[str, dict[str, str]]:
    """The packages index `server` is resolved in: its suite's, or, with a `libs_suite`, that
    suite's with the root packages taken from the server's own suite."""
    index = release_index(archive, server.suite)
    if server.libs_suite is None:
        return index
    roots = {name: index[name] for name in server.packages if name in index}
    return {**release_index(archive, server.libs_suite), **roots}


def _verified(signed: bytes, what: str) -> str:
    """The text of a clear-signed file whose signature gpgv accepts with KEYRING."""
    if shutil.which("gpgv") is None or not KEYRING.exists():
        raise SetupError(f"need gpgv and {KEYRING} (apt-get install gpgv debian-archive-keyring)")
    done = subprocess.run(["gpgv", "--keyring", str(KEYRING), "--output", "-", "-"],
                          input=signed, capture_output=True, timeout=60, check=False)
    if done.returncode != 0:
        raise SetupError(f"{what}: bad or unknown signature ({done.stderr.decode()[-200:]})")
    return done.stdout.decode()


def set_up(server: DebianServer, archive: str) -> str:
    """Fetch, check and unpack `server`'s packages; write and try its launcher. Returns
    what ``--version`` says. Unpacks beside the final directory, then swaps it in."""
    stanzas = needed(server_index(archive, server), server.packages)
    version = stanzas[0]["Version"].split(":")[-1]
    if not version.startswith(server.version):
        raise SetupError(f"{server.suite} now carries {server.packages[0]} {version}, not "
                         f"{server.version}x: change {server.flavor} in {__name__}")
    server.directory.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{server.flavor}-", dir=server.directory.parent))
    try:
        for stanza in stanzas:
            url = f"{archive}/{stanza['Filename']}"
            _unpack(checked(fetch(url), stanza["SHA256"], url), work / "root")
        _write_launcher(server, work)
        said = _check(server, work)
        (work / STAMP).write_text("".join(f"{s['Package']} {s['Version']}\n" for s in stanzas))
        shutil.rmtree(server.directory, ignore_errors=True)
        work.rename(server.directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return said


def _unpack(deb: bytes, root: Path) -> None:
    """``dpkg -x`` of one package's bytes into `root`."""
    with tempfile.NamedTemporaryFile(suffix=".deb") as fh:
        fh.write(deb)
        fh.flush()
        done = subprocess.run(["dpkg", "-x", fh.name, str(root)], capture_output=True,
                              timeout=120, check=False)
    if done.returncode != 0:
        raise SetupError(f"dpkg -x failed: {done.stderr.decode().strip()[-200:]}")


def _write_launcher(server: DebianServer, directory: Path) -> None:
    """``<directory>/<name>-server``: exec the unpacked loader on the unpacked ``*-server``
    link (so argv[0] names the server) with only the unpacked libraries; paths relative to
    the launcher, so the checkout may move."""
    root = directory / "root"
    link = f"usr/bin/{server.name}-server"
    if not (root / link).is_symlink():
        raise SetupError(f"{root / link} is missing: the package layout changed")
    libs = ":".join(f"$root/{d}" for d in LIB_DIRS if (root / d).is_dir())
    server_launcher = directory / f"{server.name}-server"
    server_launcher.write_text(
        '#!/bin/sh\nroot="$(cd "$(dirname "$0")" && pwd)/root"\n'
        f'exec "$root/{LOADER}" --library-path "{libs}" "$root/{link}" "$@"\n')
    server_launcher.chmod(0o755)


def _check(server: DebianServer, directory: Path) -> str:
    """The launcher's ``--version`` line, once every library the binary loads resolves inside
    the unpacked tree and the version is the one expected."""
    root = directory / "root"
    libs = ":".join(str(root / d) for d in LIB_DIRS if (root / d).is_dir())
    listed = subprocess.run([str(root / LOADER), "--list", "--library-path", libs,
                             str(root / "usr/bin" / f"{server.name}-check-rdb")],
                            capture_output=True, text=True, timeout=30, check=False)
    outside = [line.strip() for line in listed.stdout.splitlines()
               if "=>" in line and str(root) not in line]
    if listed.returncode != 0 or outside:
        raise SetupError(f"{server.flavor}: libraries not from the packages: "
                         f"{outside or listed.stderr.strip()}")
    said = subprocess.run([str(directory / f"{server.name}-server"), "--version"],
                          capture_output=True, text=True, timeout=30, check=False).stdout
    if f"v={server.version}" not in said:
        raise SetupError(f"{server.flavor}: --version says {said.strip()!r}")
    return said.strip()


def ensure(flavors: list[str]) -> list[str]:
    """Set up each flavor not set up yet; one line per flavor of what it is."""
    lines, archive = [], None
    for flavor in flavors:
        server = SERVERS[flavor]
        if launcher(flavor):
            lines.append(f"{flavor}: {server.launcher} (set up)")
            continue
        archive = archive or mirror()
        lines.append(f"{flavor}: {server.launcher}: {set_up(server, archive)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Set up the flavors named (default: all); exit 1 with one line on failure."""
    flavors = (sys.argv[1:] if argv is None else argv) or list(SERVERS)
    unknown = [f for f in flavors if f not in SERVERS]
    try:
        if unknown:
            raise SetupError(f"unknown flavor {unknown[0]}: one of {', '.join(SERVERS)}")
        print("\n".join(ensure(flavors)))
    except (SetupError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
