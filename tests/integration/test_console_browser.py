"""The dead-letter console in a real browser: Playwright driving Debian's chromium
(``/usr/bin/chromium``, installed by ``make test`` with apt-get; no browser is downloaded)
against the console served by uvicorn (recovery.console.app) over a real Redis with seeded
letters. Log in, filter, open a letter, redrive three selected letters and watch the progress
(recovery.console.tasks); then Redis itself: the three back in their source with their fields
byte for byte, every other letter untouched. And in the browser too: a filter's preview, the
redrive of what it matched, a delete after its confirmation, both in the audit log."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from recovery.testing.local_redis import LocalServer
from tests.support.console_tools import (
    DLQ,
    OPERATOR,
    OPERATOR_SECRET,
    entries,
    live_console,
    seed,
    state_for,
)

CHROMIUM = os.environ.get("RECOVERY_TEST_CHROMIUM", "/usr/bin/chromium")
R_LIMIT, R_FAILED = "max-deliveries-exceeded", "handler-failed-at-limit"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's chromium, headless (no sandbox: the tests may run as root)."""
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM) or os.path.exists(CHROMIUM), (
        f"no chromium at {CHROMIUM}: apt-get install chromium (make test does)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


def log_in(page: Any) -> None:
    """Fill in and send the console's login form on `page` as the operator."""
    page.fill("input[name=user]", OPERATOR)
    page.fill("input[name=secret]", OPERATOR_SECRET)
    page.click("button[type=submit]")


@pytest.mark.slow
def test_log_in_filter_open_and_redrive_three(browser: object,
                                               redis_server: LocalServer) -> None:
    r = redis_server.client()
    payloads = [{b"n": str(i).encode(), b"blob": bytes([i, 0, 255]), b"note": "é".encode()}
                for i in range(10)]
    ids = seed(r, "orders", payloads, reasons=[R_LIMIT, R_FAILED] * 5)
    other = seed(r, "payments", [{b"n": b"p"}])
    letters_before = dict(entries(r, DLQ["orders"]))
    source_before = r.xlen("orders")
    state = state_for(redis_server, rate=3)  # slow enough to watch the progress
    try:
        with live_console(state) as live:
            page = browser.new_page()  # type: ignore[attr-defined]
            page.goto(f"{live.url}/")
            assert page.url.endswith("/login")
            log_in(page)
            page.wait_for_selector("#streams")
            page.click(f"#streams a:text-is('{DLQ['orders']}')")
            page.wait_for_selector("#letters")

            page.fill("input[name=reason]", R_FAILED)
            page.select_option("select[name=order]", "oldest")
            page.click("#apply-filter")
            page.wait_for_url("**reason=handler-failed-at-limit**")
            shown = page.eval_on_selector_all("#letters tbody tr[id^=letter-]",
                                              "rows => rows.map(r => r.id.slice(7))")
            assert shown == ids[1::2]

            page.click(f"#letter-{ids[3]} a.open")
            page.wait_for_selector("#metadata")
            assert page.inner_text("#metadata").count(R_FAILED) == 1
            assert "hex 03 00 ff" in page.inner_text("#fields")
            page.go_back()

            chosen = [ids[1], ids[5], ids[7]]
            for i in chosen:
                page.check(f"#letter-{i} input[name=ids]")
            page.click("#redrive-selected")
            page.wait_for_selector("#progress")
            seen = [page.get_attribute("#progress", "data-done")]
            deadline = time.monotonic() + 20
            while seen[-1] != "1" and time.monotonic() < deadline:
                time.sleep(0.2)
                try:
                    seen.append(page.get_attribute("#progress", "data-done", timeout=2000))
                except Exception:  # the page reloads itself (meta refresh): ask again
                    continue
            assert seen[0] == "0" and seen[-1] == "1", seen  # running first, then finished
            assert "3 moved back" in page.inner_text("#progress")
            page.close()
    finally:
        state.close()

    left = dict(entries(r, DLQ["orders"]))
    assert left == {i: f for i, f in letters_before.items() if i not in chosen}
    added = [flat for _, flat in entries(r, "orders")][source_before:]
    originals = [letters_before[i][:letters_before[i].index(b"x-original-stream")]
                 for i in chosen]
    assert added == [[*o, b"x-redrive-count", b"1"] for o in originals]
    assert [i for i, _ in entries(r, DLQ["payments"])] == other


@pytest.mark.slow
def test_redrive_what_a_filter_matches_after_its_preview_then_delete_one(
        browser: object, redis_server: LocalServer) -> None:
    r = redis_server.client()
    ids = seed(r, "orders", [{b"n": str(i).encode()} for i in range(8)],
               reasons=[R_LIMIT, R_FAILED] * 4)
    state = state_for(redis_server)
    try:
        with live_console(state) as live:
            page = browser.new_page()  # type: ignore[attr-defined]
            page.goto(f"{live.url}/login")
            log_in(page)
            page.goto(f"{live.url}/browse?key=%7Borders%7D%3Adlq&reason={R_FAILED}")
            page.click("#preview")
            page.wait_for_selector("#redrive-matching", timeout=20_000)
            assert "4 letters match" in page.inner_text("#progress")
            assert r.xlen(DLQ["orders"]) == 8  # the preview moved nothing
            page.click("#redrive-matching")
            page.wait_for_selector("#progress[data-done='1']", timeout=20_000)
            assert "4 moved back" in page.inner_text("#progress")

            page.goto(f"{live.url}/browse?key=%7Borders%7D%3Adlq")
            page.check(f"#letter-{ids[0]} input[name=ids]")
            page.click("#delete-selected")
            page.wait_for_selector("#confirm")
            assert r.xlen(DLQ["orders"]) == 4  # asking deletes nothing
            page.check("#confirm")
            page.click("#delete-confirmed")
            assert "1 of 1 selected letters deleted" in page.inner_text("#deleted")
            page.goto(f"{live.url}/audit")
            audit = page.inner_text("#audit")
            assert "delete" in audit and "redrive-filter" in audit and OPERATOR in audit
            page.close()
    finally:
        state.close()
    assert [i for i, _ in entries(r, DLQ["orders"])] == ids[2::2]
    assert [f[1] for _, f in entries(r, "orders")][-4:] == [b"1", b"3", b"5", b"7"]


@contextmanager
def page_elsewhere(html: str) -> Iterator[str]:
    """`html` served at http://localhost:<free port>/ (another site than the console's
    127.0.0.1, as Grafana is), in a thread; its URL."""
    body = html.encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_link_from_another_site_opens_the_streams_letters(browser: object,
                                                              redis_server: LocalServer) -> None:
    """As a click on the Grafana dashboard's data link: the SameSite=Strict session cookie is
    not sent with it, and the console's same-site reload brings the logged-in user to the
    stream's letters (recovery.console.links)."""
    ids = seed(redis_server.client(), "orders", [{b"n": b"1"}, {b"n": b"2"}])
    state = state_for(redis_server)
    try:
        with live_console(state) as live:
            page = browser.new_page()  # type: ignore[attr-defined]
            page.goto(f"{live.url}/login")
            log_in(page)
            page.wait_for_selector("#streams")
            with page_elsewhere(f'<a id="go" href="{live.url}/streams/orders">orders</a>') as at:
                page.goto(at)
                page.click("#go")
                page.wait_for_selector("#letters")
            assert page.url == f"{live.url}/browse?key=%7Borders%7D%3Adlq"
            assert all(page.locator(f"#letter-{i}").count() == 1 for i in ids)
            page.context.clear_cookies()  # logged out: the login form, no loop
            page.goto(f"{live.url}/streams/orders")
            page.wait_for_url("**/login")
    finally:
        state.close()
