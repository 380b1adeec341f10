"""Links from the jobs' summaries to the dead-letter console (recovery.report.console_links,
``dead_letter.console_url``): a real recovery run and a real dead-letter read on a real
server carry ``console_links``, one per dead-letter stream they wrote to (read), each
naming the log under the summary table; each link's path, asked of the console over the
same server, opens that stream's letters. Without the setting the key is empty and the log
says nothing; a URL with a login in it is refused before anything runs."""

from __future__ import annotations

import json
import logging
from urllib.parse import urlsplit

import pytest
from pyspark.sql import SparkSession

from recovery.console.serve import ServeOptions, console_state
from recovery.console.users import load_users
from recovery.jobs.dead_letters import DeadLettersJob
from recovery.report.console_links import console_links, link_lines
from recovery.settings.model import load_settings
from recovery.testing.local_redis import LocalServer
from tests.support.console_tools import READER, READER_SECRET, USERS, entries, logged_in
from tests.support.fault_tools import run_in_process
from tests.support.target_tools import OVER, args, stuck

BASE = "https://dlq.example.com/console"


@pytest.mark.slow
def test_a_run_links_each_dead_letter_stream_it_wrote_to(
        spark: SparkSession, redis_server: LocalServer, tmp_path, caplog, capsys) -> None:
    client = redis_server.client()
    stuck(client, "orders", "billing")  # OVER entries over the limit: dead-lettered
    stuck(client, "quiet", "billing", 3)  # ...acked: nothing of it goes to a dead letter
    client.xack("quiet", "billing", *[i for i, _ in client.xrange("quiet")])
    caplog.set_level(logging.INFO)

    result = run_in_process(spark, args(redis_server, tmp_path / "r", "streams.keys=orders,quiet",
                                        f"dead_letter.console_url={BASE}/"))

    assert result.code == 0, result.stderr[-2000:]
    assert client.xlen("{orders}:dlq") == OVER and not client.exists("{quiet}:dlq")
    url = f"{BASE}/streams/%7Borders%7D%3Adlq"
    assert result.summary["console_links"] == {"{orders}:dlq": url}
    assert f"dead letters of {{orders}}:dlq in the console: {url}" in caplog.text

    settings = load_settings(None, [f"redis.url={redis_server.url}", "streams.keys=orders,quiet"])
    state = console_state(settings, load_users(USERS), ServeOptions())
    try:
        browser, _ = logged_in(state, READER, READER_SECRET)
        reply = browser.get(urlsplit(url).path.removeprefix("/console"))
        assert reply.status_code == 303, reply.text
        page = browser.get(reply.headers["location"])
        assert page.status_code == 200
        assert all(i in page.text for i, _ in entries(client, "{orders}:dlq"))
    finally:
        state.close()

    caplog.clear()
    capsys.readouterr()
    argv = ["--set", f"redis.url={redis_server.url}", "--set", f"report.path={tmp_path / 'd'}",
            "--set", "streams.keys=orders,quiet", "--set", f"dead_letter.console_url={BASE}"]
    assert DeadLettersJob(lambda _: spark).main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["console_links"] == {"{orders}:dlq": url}
    assert f"dead letters of {{orders}}:dlq in the console: {url}" in caplog.text
    assert client.xlen("{orders}:dlq") == OVER  # read, never changed


@pytest.mark.slow
def test_without_the_setting_there_are_no_links(spark: SparkSession, redis_server: LocalServer,
                                                tmp_path, caplog) -> None:
    client = redis_server.client()
    stuck(client, "orders", "billing")
    caplog.set_level(logging.INFO)

    result = run_in_process(spark, args(redis_server, tmp_path / "r", "streams.keys=orders"))

    assert result.code == 0, result.stderr[-2000:]
    assert client.xlen("{orders}:dlq") == OVER
    assert result.summary["console_links"] == {}
    assert "in the console:" not in caplog.text


@pytest.mark.parametrize("url", ["https://ops:s3cret@dlq.example.com", "ftp://dlq.example.com",
                                 "https://dlq.example.com/?token=s3cret", "dlq.example.com"])
def test_a_console_url_that_cannot_be_a_base_address_is_refused(redis_server: LocalServer,
                                                                  tmp_path, capsys,
                                                                  url: str) -> None:
    before = sorted(redis_server.client().keys("*"))
    argv = ["--set", f"redis.url={redis_server.url}", "--set", f"report.path={tmp_path}",
            "--set", "streams.keys=orders", "--set", f"dead_letter.console_url={url}"]

    assert DeadLettersJob(lambda _: pytest.fail("no session for a bad config")).main(argv) == 2

    err = capsys.readouterr().err
    assert "dead_letter.console_url" in err and "s3cret" not in err
    assert sorted(redis_server.client().keys("*")) == before


def test_each_stream_links_to_its_percent_encoded_console_page():
    """Any key works: the name is one path segment, percent-encoded; each stream once."""
    links = console_links("https://console.example", ["orders:dlq", "a b/c", "orders:dlq"])
    assert links == {"a b/c": "https://console.example/streams/a%20b%2Fc",
                     "orders:dlq": "https://console.example/streams/orders%3Adlq"}
    assert console_links(None, ["orders:dlq"]) == {} == console_links("", ["orders:dlq"])
    assert link_lines({"k": "u"}) == ["dead letters of k in the console: u"]
