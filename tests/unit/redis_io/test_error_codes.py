"""The code of a server's error reply (recovery.redis_io.error_codes), wherever the server
put it: read from real replies of Redis 7.0, Valkey 8.1 and Redis 6.2 (whose script errors
start with ``Error running script``), and from texts of any shape, which never raise."""

from __future__ import annotations

from typing import Any

import pytest
from redis import Redis
from redis.exceptions import NoScriptError, ResponseError

from recovery.redis_io.error_codes import error_code, server_text, unit_vanished
from recovery.redis_io.redis_conn import wrong_type
from recovery.redis_io.round_trips import each
from recovery.testing.local_redis import LocalServer
from tests.support.servers import SCRIPT_ERRORS_KEEP_THEIR_CODE, has

NOGROUP_IN_SCRIPT = "return redis.call('XAUTOCLAIM', KEYS[1], 'nogroup', 'c', 0, '0-0')"
WRONGTYPE_IN_SCRIPT = "return redis.call('XPENDING', KEYS[1], 'g', '-', '+', 10)"
BUSYGROUP_IN_SCRIPT = "return redis.call('XGROUP', 'CREATE', KEYS[1], 'g', '0')"


def _error(call: Any) -> Exception:
    """The error `call()` raised (the test fails if it raised none)."""
    try:
        call()
    except Exception as exc:  # any error is what is being captured
        return exc
    raise AssertionError("no error")


def captured(client: Redis) -> dict[str, Exception]:
    """Errors of the real server: inside scripts, plain, pipelined, and redis-py's own."""
    client.xadd("s", {"a": 1})
    client.xgroup_create("s", "g", "0")
    client.set("str", "x")
    pipe = client.pipeline(transaction=False)
    pipe.eval(NOGROUP_IN_SCRIPT, 1, "s")
    return {
        "script NOGROUP": _error(lambda: client.eval(NOGROUP_IN_SCRIPT, 1, "s")),
        "script NOGROUP no key": _error(lambda: client.eval(NOGROUP_IN_SCRIPT, 1, "none")),
        "script WRONGTYPE": _error(lambda: client.eval(WRONGTYPE_IN_SCRIPT, 1, "str")),
        "script BUSYGROUP": _error(lambda: client.eval(BUSYGROUP_IN_SCRIPT, 1, "s")),
        "plain NOGROUP": _error(lambda: client.xautoclaim("s", "nogroup", "c", 0)),
        "plain WRONGTYPE": _error(lambda: client.xautoclaim("str", "g", "c", 0)),
        "plain BUSYGROUP": _error(lambda: client.xgroup_create("s", "g", "0")),
        "NOSCRIPT": _error(lambda: client.evalsha("0" * 40, 0)),
        "pipelined script NOGROUP": _error(pipe.execute),
        "each script NOGROUP": each(client, [("EVAL", NOGROUP_IN_SCRIPT, 1, "s")])[0],
        "no such key": each(client, [("XINFO", "STREAM", "none")])[0],
    }


EXPECTED_CODES = {
    "script NOGROUP": "NOGROUP", "script NOGROUP no key": "NOGROUP",
    "script WRONGTYPE": "WRONGTYPE", "script BUSYGROUP": "BUSYGROUP",
    "plain NOGROUP": "NOGROUP", "plain WRONGTYPE": "WRONGTYPE", "plain BUSYGROUP": "BUSYGROUP",
    "NOSCRIPT": "NOSCRIPT", "pipelined script NOGROUP": "NOGROUP",
    "each script NOGROUP": "NOGROUP", "no such key": "ERR",
}


def test_error_codes_of_real_replies_wherever_the_server_put_them(server: LocalServer):
    """Redis 7.0, Valkey 8.1 and Redis 6.2 (whose script errors start with 'Error running
    script'): every captured reply gets its code, and a vanished unit is told apart."""
    client = server.client()
    errors = captured(client)
    wrapped = server_text(errors["script NOGROUP"])
    if has(client, SCRIPT_ERRORS_KEEP_THEIR_CODE):
        assert wrapped.startswith("NOGROUP "), wrapped
    else:  # the shape at issue
        assert wrapped.startswith("Error running script (call to"), wrapped
    assert {name: error_code(exc) for name, exc in errors.items()} == EXPECTED_CODES, \
        {name: str(exc) for name, exc in errors.items()}
    assert isinstance(errors["NOSCRIPT"], NoScriptError)
    vanished = {name for name, exc in errors.items() if unit_vanished(exc)}
    assert vanished == {"script NOGROUP", "script NOGROUP no key", "script WRONGTYPE",
                        "plain NOGROUP", "plain WRONGTYPE", "pipelined script NOGROUP",
                        "each script NOGROUP"}
    assert {n for n, exc in errors.items() if wrong_type(exc)} == \
        {"script WRONGTYPE", "plain WRONGTYPE"}


@pytest.mark.parametrize(("text", "code"), [
    ("", "ERR"),
    ("   ", "ERR"),
    ("no such key", "ERR"),
    ("Error running script (call to f_", "ERR"),
    ("Error running script (call to f_abc): @user_script:1: ", "ERR"),
    ("Error running script (call to f_abc): @user_script:?: NOGROUP x", "NOGROUP"),
    ("Error running script (call to f_abc): @user_script:1: @user_script: 1: The user "
     "executing the script can't run this command or subcommand", "ERR"),
    ("ERR Error running script (call to f_abc): @user_script:25: WRONGTYPE Operation", "WRONGTYPE"),
    ("Command # 3 (EVALSHA abc 1 s) of pipeline caused error: Error running script (call to "
     "f_abc): @user_script:25: NOGROUP No such key 's'", "NOGROUP"),
    ("Command # 1 (X) of pipeline caused error: BUSYGROUP Consumer Group name already exists",
     "BUSYGROUP"),
    ("nogroup lower case is not a code", "ERR"),
    ("NOGROUP\nsecond line", "NOGROUP"),
    ("\udcff\x00 \u00e9", "ERR"),
    ("Error running script " * 10_000, "ERR"),
    ("A", "ERR"),
])
def test_error_code_of_a_text_of_any_shape_never_raises(text: str, code: str):
    assert error_code(ResponseError(text)) == code
    assert error_code(text) == code


def test_error_code_reads_the_code_redis_py_took_off_and_odd_exceptions():
    assert error_code(ResponseError("no matching script", status_code="NOSCRIPT")) == "NOSCRIPT"
    assert error_code(ResponseError("Error running script (call to f_a): @user_script:2: "
                                    "NOGROUP x", status_code="ERR")) == "NOGROUP"
    assert error_code(ResponseError()) == "ERR"
    assert error_code(ResponseError(b"\xffNOGROUP", 3)) == "ERR"
    assert error_code(ValueError(None)) == "ERR"
    assert error_code(b"WRONGTYPE Operation") == "WRONGTYPE"
    assert error_code(None) == "ERR"
    assert not unit_vanished(ValueError("NOGROUP not a server reply"))
