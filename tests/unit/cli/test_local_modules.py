"""Which handler modules the installed command ships with ``--py-files``
(recovery.cli.local_modules): a ``<name>.py`` of the working directory that nothing else
provides, added after the user's own py-files; never a package, an installed module or a
standard-library name. The runs themselves are in tests/integration/test_first_hour.py."""

from __future__ import annotations

import pytest

from recovery.cli.local_modules import with_shipped_modules

STREAMS = ["--set", "streams.keys=orders"]  # a config needs a selection to load


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RECOVERY_HANDLER__PATH", raising=False)
    (tmp_path / "myhandlers.py").write_text("def handle(messages):\n    return []\n")
    (tmp_path / "myerrors.py").write_text("class Unparseable(Exception):\n    pass\n")
    (tmp_path / "json.py").write_text("")  # a standard-library name
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    return tmp_path


def test_a_module_of_the_working_directory_is_added_to_py_files(folder, capsys):
    args = [*STREAMS, "--set", "handler.path=myhandlers:handle",
            "--set", 'handler.dead_letter_exceptions=["myerrors.Unparseable"]']

    shipped = with_shipped_modules("run", args, ["--master", "local[2]"])

    assert shipped == ["--master", "local[2]", "--py-files",
                       f"{folder / 'myhandlers.py'},{folder / 'myerrors.py'}"]
    assert capsys.readouterr().err.count("shipping ") == 2


def test_the_users_own_py_files_come_first_and_are_not_repeated(folder):
    args = [*STREAMS, "--set", "handler.path=myhandlers:handle"]
    assert with_shipped_modules("dry-run", args, ["--py-files", "a.zip", "--master", "x"]) == [
        "--master", "x", "--py-files", f"a.zip,{folder / 'myhandlers.py'}"]
    assert with_shipped_modules("run", args, ["--conf", "spark.submit.pyFiles=b.zip"]) == [
        "--conf", "spark.submit.pyFiles=b.zip", "--py-files", f"b.zip,{folder / 'myhandlers.py'}"]
    given = ["--py-files", str(folder / "myhandlers.py")]
    assert with_shipped_modules("run", args, given) == given


@pytest.mark.parametrize("handler", ["json:loads", "pkg.sub:handle", "nowhere:handle",
                                     "recovery.handlers:example_handler"])
def test_nothing_else_is_shipped(folder, handler):
    assert with_shipped_modules("run", [*STREAMS, "--set", f"handler.path={handler}"], []) == []


def test_only_the_commands_that_run_a_handler_ship_and_a_bad_config_is_left_to_the_checks(
        folder):
    args = [*STREAMS, "--set", "handler.path=myhandlers:handle"]
    assert with_shipped_modules("redrive", args, []) == []
    assert with_shipped_modules("run", [*args, "--help"], []) == []
    assert with_shipped_modules("run", [*args, "--set", "claim.bogus=1"], []) == []
    assert with_shipped_modules("run", ["--config", str(folder / "missing.toml"), *args],
                                []) == []
