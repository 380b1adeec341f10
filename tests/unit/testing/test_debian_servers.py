"""How the newest servers are found and fetched (recovery.testing.debian_servers): the mirror
read from apt's sources, the packages a server needs from a suite's index, and failures as one
line. That the servers it sets up run and report their versions:
tests/unit/testing/test_servers.py."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from recovery.testing import debian_servers
from recovery.testing.debian_servers import (
    MIRROR_ENV,
    SetupError,
    checked,
    fetch,
    main,
    mirror,
    needed,
    parse_packages,
)
from recovery.testing.local_redis import free_port

DEB822 = """\
Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
# a comment
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
"""

INDEX = """\
Package: srv
Version: 5:8.0.2-3
Section: database
Depends: adduser, libone (>= 2.38), libalt | libother, srv-data
Filename: pool/main/s/srv.deb

Package: libone
Section: libs
Pre-Depends: libbase
Depends: libone (>= 1), notalib

Package: libbase
Section: libs

Package: libalt
Section: libs

Package: libother
Section: libs

Package: adduser
Section: admin

Package: notalib
Section: utils

Package: srv-data
Section: database
"""


@pytest.fixture(autouse=True)
def no_mirror_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIRROR_ENV, raising=False)


def test_the_mirror_is_the_first_deb_source_of_a_release(tmp_path: Path) -> None:
    (tmp_path / "debian.sources").write_text(DEB822)
    assert mirror((tmp_path / "sources.list", tmp_path)) == "http://mirror.example/debian"


def test_one_line_sources_are_read_too(tmp_path: Path) -> None:
    listed = tmp_path / "sources.list"
    listed.write_text("# deb http://old.example/debian bookworm main\n"
                      "deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main\n")
    assert mirror((listed, tmp_path / "none")) == "http://one.example/debian"


def test_without_a_release_source_the_error_says_what_to_set(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    (tmp_path / "security.sources").write_text(DEB822.split("\n\n")[0])
    with pytest.raises(SetupError, match=MIRROR_ENV):
        mirror((tmp_path,))
    monkeypatch.setenv(MIRROR_ENV, "http://set.example/debian/")
    assert mirror((tmp_path,)) == "http://set.example/debian"


def test_a_server_needs_its_roots_and_their_library_packages_only() -> None:
    index = parse_packages(INDEX)
    assert index["srv"]["Depends"].startswith("adduser")
    names = [s["Package"] for s in needed(index, ("srv", "srv-data"))]
    assert names == ["srv", "srv-data", "libone", "libalt", "libbase"]
    with pytest.raises(SetupError, match="missing-root"):
        needed(index, ("missing-root",))


def test_a_download_is_checked_against_the_index() -> None:
    data = b"a package"
    assert checked(data, hashlib.sha256(data).hexdigest(), "x.deb") == data
    with pytest.raises(SetupError, match=re.escape("x.deb: SHA256 mismatch")):
        checked(data + b"!", hashlib.sha256(data).hexdigest(), "x.deb")


def test_an_unreachable_mirror_is_one_line_at_once(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}/debian/dists/sid/InRelease"
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    with pytest.raises(SetupError, match=f"^{re.escape(f'cannot fetch {url}: ')}"):
        fetch(url)
    assert main(["redis99"]) == 1
    assert capsys.readouterr().err == \
        "error: unknown flavor redis99: one of redis80, valkey91, redis86\n"


def test_a_server_of_experimental_takes_its_libraries_from_sid(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """Redis 8.6's flavor: the server's packages from experimental (which carries only what
    differs from sid), every library from sid, even one experimental also carries."""
    suites = {
        "experimental": parse_packages(INDEX.replace("5:8.0.2-3", "5:8.6.3-1")
                                       + "\nPackage: libbase\nSection: libs\nVersion: 9\n"),
        "sid": parse_packages(INDEX),
    }
    monkeypatch.setattr(debian_servers, "release_index", lambda archive, suite: suites[suite])
    server = debian_servers.DebianServer("x", "experimental", ("srv", "srv-data"), "redis",
                                         "8.6.", "redis_version", libs_suite="sid")
    index = debian_servers.server_index("http://mirror.example/debian", server)
    assert index["srv"]["Version"] == "5:8.6.3-1"
    assert "Version" not in index["libbase"], "sid's libbase, not experimental's"
    assert debian_servers.SERVERS["redis86"].libs_suite == "sid"
