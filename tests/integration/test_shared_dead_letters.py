"""Dead-letter stream names the team chooses (``dead_letter.stream``, the naming rule in
recovery.redis_io.dlq_names): the template, its refusals, one stream shared by many sources
on Redis 7.0 (a real run, the letters read back with XRANGE, the redrive and the dead-letter
read: the same scripts and commands as for a stream per source, which run on every server in
tests/integration/test_end_to_end.py, tests/unit/redrive/test_run.py and
tests/unit/dead_letters/test_read.py), and on a Redis Cluster the refusal of a name outside its
source's slot and a hash-tagged template that works there."""

from __future__ import annotations

import pytest
import redis
from redis.crc import key_slot

from recovery.dead_letters.report import DeadLetterSummary
from recovery.dead_letters.run import read_dead_letters, run_dead_letters
from recovery.driver.job import run
from recovery.errors import DeadLetterNameError
from recovery.params import RedisParams
from recovery.redis_io.dlq_names import DeadLetterNames, labels
from recovery.redis_io.redis_conn import connect
from recovery.redis_io.streams import Fields, pairs
from recovery.redrive.run import RedriveSummary, run_redrive
from recovery.settings.model import load_settings
from tests.support.backlogs import HOUR_MS, Seeded, age_pending, seed
from tests.support.cluster_fixtures import LocalCluster
from tests.support.fault_tools import job_args, run_in_process
from tests.support.invariants import pel
from tests.support.redrive_tools import redrive
from tests.support.servers import ON_ONE_SERVER

CDL = "CDL"
SOURCES = ["orders", "payments"]
GROUP = "billing"


# --- The rule, without a server --------------------------------------------------------

@pytest.mark.parametrize(("template", "stream", "group", "name"), [
    (None, "orders", "billing", "{orders}:dlq"),          # no template: the slot rule
    (None, "orders{eu}", "billing", "orders{eu}:dlq"),
    ("CDL", "orders", "billing", "CDL"),                  # one stream for every source
    ("dlq:{group}", "orders", "billing", "dlq:billing"),
    ("{stream}:dlq", "orders", "billing", "orders:dlq"),
    ("{{{stream}}}:dlq", "orders", "billing", "{orders}:dlq"),  # {{ and }}: literal braces
    ("CDL{{eu}}", "orders{eu}", "billing", "CDL{eu}"),
])
def test_a_template_names_the_dead_letter_stream(template, stream, group, name):
    names = DeadLetterNames(":dlq", template)
    assert names.key(stream, group) == name
    assert names.is_dead_letter(name)
    assert not names.is_dead_letter(stream)


def test_discovery_matcher_knows_every_name_of_the_template():
    names = DeadLetterNames(":dlq", "dlq:{group}")
    assert names.is_dead_letter("dlq:any group at all") and names.is_dead_letter("x:dlq")
    assert not names.is_dead_letter("dlq") and not names.is_dead_letter("orders")
    assert names.per_group and not DeadLetterNames(":dlq", "CDL").per_group
    assert names.keys_of("orders", ["a", "b", "a"]) == ["dlq:a", "dlq:b"]
    assert DeadLetterNames(":dlq", "CDL").keys_of("orders", []) == ["CDL"]


def test_a_shared_stream_is_listed_once_under_its_own_name():
    assert labels([("a", "CDL"), ("b", "CDL"), ("c", "{c}:dlq")]) == {"CDL": "CDL",
                                                                      "{c}:dlq": "c"}


@pytest.mark.parametrize(("template", "fragment"), [
    ("dlq:{queue}", "unknown placeholder {queue}"),
    ("dlq:{0}", "unknown placeholder {0}"),
    ("dlq:{stream!r}", "unknown placeholder {stream!r}"),
    ("dlq{eu}", "unknown placeholder {eu}"),
    ("dlq{", "literal brace"),
    ("{stream}", "no fixed text"),
])
def test_a_bad_template_is_a_config_error_naming_the_field_and_fix(template, fragment):
    result = run_in_process(None, job_args("redis://127.0.0.1:1", "/tmp/unused", ["orders"],
                                           f"dead_letter.stream={template}"))
    assert result.code == 2, result.stderr
    [line] = result.error_lines()
    assert "dead_letter.stream" in line and fragment in line, line


def test_the_environment_sets_the_template(monkeypatch):
    monkeypatch.setenv("RECOVERY_DEAD_LETTER__STREAM", "dlq:{group}")
    settings = load_settings(None, ["streams.keys=orders"])
    assert settings.dead_letter.names.key("orders", "billing") == "dlq:billing"
    assert settings.dead_letter.suffix == ":dlq"


# --- One stream for every source, on a real server -------------------------------------

def raw_entries(server_url: str, key: str) -> list[tuple[str, Fields]]:
    """XRANGE of `key` with field order and duplicates kept."""
    raw = connect(RedisParams(server_url))
    try:
        return [(i.decode(), pairs(f)) for i, f in raw.execute_command("XRANGE", key, "-", "+")]
    finally:
        raw.close()


def watched_letters(client: redis.Redis) -> dict[str, object]:
    """A group on CDL with a stuck entry: a run that took CDL for a source would claim it.
    The entry is a letter of a source not selected (its x-death block), as a team reading
    its dead letters through a group of its own has: the run still writes into CDL."""
    entry_id = client.xadd(CDL, {b"watch": b"1", b"x-original-stream": b"elsewhere",
                                 b"x-original-id": b"1-1",
                                 b"x-death-reason": b"max-deliveries-exceeded"}).decode()
    client.xgroup_create(CDL, "watchers", id="0")
    client.xreadgroup("watchers", "worker-dead", {CDL: ">"})
    age_pending(client, CDL, "watchers", [entry_id], HOUR_MS)
    return pel(client, CDL, "watchers")


def dead_lettered(seeded: Seeded, stream: str) -> set[str]:
    return {i for (s, _, i), a in seeded.action.items() if s == stream and a == "dead_lettered"}


def check_letters(server_url: str, originals: dict[str, dict[str, Fields]], seeded: Seeded,
                  run_id: str) -> None:
    """Every letter in CDL: the original fields byte for byte and in order, then its
    x-death block naming its own source; exactly the entries meant to be dead-lettered."""
    found: dict[str, set[str]] = {s: set() for s in SOURCES}
    for _, fields in raw_entries(server_url, CDL):
        meta = dict(fields)
        if meta[b"x-original-stream"] == b"elsewhere":
            continue  # the watchers' own entry
        source, original = meta[b"x-original-stream"].decode(), meta[b"x-original-id"].decode()
        block = fields.index((b"x-original-stream", source.encode()))
        assert fields[:block] == originals[source][original]
        assert meta[b"x-original-group"] == GROUP.encode()
        assert meta[b"x-run-id"] == run_id.encode()
        assert meta[b"x-death-reason"] in (b"max-deliveries-exceeded",
                                           b"handler-failed-at-limit")
        assert meta[b"x-delivery-limit"] == b"5" and int(meta[b"x-delivery-count"]) >= 5
        found[source].add(original)
    assert found == {s: dead_lettered(seeded, s) for s in SOURCES}


@pytest.mark.slow
@ON_ONE_SERVER  # every server: see the module's docstring
def test_every_source_dead_letters_into_one_shared_stream(spark, server, client,
                                                          make_settings):
    seeded = seed(client, SOURCES, [GROUP])
    originals = {s: dict(raw_entries(server.url, s)) for s in SOURCES}
    watchers = watched_letters(client)
    settings = make_settings("streams.match=*", "claim.max_deliveries=5",
                             f"dead_letter.stream={CDL}",
                             "handler.path=tests.support.handlers:verify_or_fail")
    summary = run(spark, settings)
    assert {u["stream"] for u in summary.units} == set(SOURCES)  # CDL is never a source
    assert pel(client, CDL, "watchers") == watchers
    assert not client.keys("*:dlq")
    check_letters(server.url, originals, seeded, summary.run_id)
    length = client.xlen(CDL)
    assert summary.health_after["dead_letter_length"] == length  # once, not once per source
    assert summary.after.dead_letters == {CDL: length}
    assert {h["dead_letter_length"] for h in summary.unit_health} == {1}  # before: the watch
    letters = read_dead_letters(spark, settings)
    assert letters.count() == length  # the shared stream read once
    assert letters.filter("source_stream = 'orders'").count() == len(dead_lettered(seeded,
                                                                                   "orders"))
    read = run_dead_letters(spark, settings, DeadLetterSummary("dl-t"))
    assert [(r["stream"], r["dead_letter_stream"], r["sources"], r["length"], r["read"])
            for r in read.streams] == [(CDL, CDL, SOURCES, length, length)]
    assert read.totals["dead_letter_streams"] == 1 and read.totals["dead_letters"] == length


@pytest.mark.slow
@ON_ONE_SERVER  # every server: see the module's docstring
def test_redrive_sends_each_letter_of_a_shared_stream_to_its_own_source(spark, server, client,
                                                                         make_settings):
    seeded = seed(client, SOURCES, [GROUP])
    settings = make_settings("streams.keys=orders,payments", "claim.max_deliveries=5",
                             f"dead_letter.stream={CDL}",
                             "handler.path=tests.support.handlers:verify_or_fail")
    run(spark, settings)
    before = {s: client.xlen(s) for s in SOURCES}
    summary = redrive(server, "streams.keys=orders", f"dead_letter.stream={CDL}")
    back = dead_lettered(seeded, "orders")
    assert summary.totals["redriven"] == len(back)
    assert client.xlen("orders") == before["orders"] + len(back)
    assert client.xlen("payments") == before["payments"]
    left = {dict(f)[b"x-original-stream"] for _, f in raw_entries(server.url, CDL)}
    assert left == {b"payments"}  # the payments letters stay, every orders letter left
    redrive(server, "streams.keys=payments", f"dead_letter.stream={CDL}")
    assert client.xlen(CDL) == 0
    assert client.xlen("payments") == before["payments"] + len(dead_lettered(seeded,
                                                                             "payments"))


@pytest.mark.slow
@ON_ONE_SERVER  # every server: see the module's docstring
def test_a_name_per_group_keeps_each_groups_letters_apart(spark, server, client,
                                                          make_settings):
    seeded = seed(client, ["orders"], [GROUP, "audit"])
    settings = make_settings("streams.match=*", "claim.max_deliveries=5",
                             "dead_letter.stream=dlq:{group}",
                             "handler.path=tests.support.handlers:verify_or_fail")
    run(spark, settings)
    run(spark, settings)  # the dead-letter streams are no sources, even when matched
    for group in (GROUP, "audit"):
        groups = {dict(f)[b"x-original-group"] for _, f in raw_entries(server.url,
                                                                       f"dlq:{group}")}
        assert groups == {group.encode()}
        assert client.xlen(f"dlq:{group}") == len(dead_lettered(seeded, "orders"))
    summary = redrive(server, "streams.keys=orders", "dead_letter.stream=dlq:{group}",
                      "redrive.groups=audit")
    assert client.xlen("dlq:audit") == 0 and client.xlen(f"dlq:{GROUP}") > 0
    assert summary.totals["redriven"] == len(dead_lettered(seeded, "orders"))


# --- On a Redis Cluster: names in their source's slot, or no run -------------------------

@pytest.fixture
def rc(redis_cluster: LocalCluster):
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    client = redis_cluster.client()
    yield client
    client.close()


@pytest.mark.slow
def test_a_name_outside_its_sources_slot_refuses_the_run_on_a_cluster(spark, redis_cluster,
                                                                      rc, tmp_path):
    seed(rc, ["orders{eu}"], [GROUP])
    assert key_slot(CDL.encode()) != key_slot(b"orders{eu}")
    before = pel(rc, "orders{eu}", GROUP)
    result = run_in_process(spark, job_args(redis_cluster.url, tmp_path, ["orders{eu}"],
                                           f"dead_letter.stream={CDL}"))
    assert result.code == 2, result.stderr
    [line] = result.error_lines()
    assert "'orders{eu}'" in line and "'CDL'" in line and "hash tag" in line, line
    assert pel(rc, "orders{eu}", GROUP) == before  # nothing claimed, nothing moved
    assert not rc.exists(CDL)
    settings = load_settings(None, [f"redis.url={redis_cluster.url}", "streams.keys=orders{eu}",
                                    f"dead_letter.stream={CDL}"])
    with pytest.raises(DeadLetterNameError, match="hash tag"):
        run_redrive(settings, RedriveSummary("t"))


@pytest.mark.slow
def test_a_hash_tagged_shared_name_works_on_a_cluster(spark, redis_cluster, rc, tmp_path):
    sources = ["orders{eu}", "payments{eu}"]
    seeded = seed(rc, sources, [GROUP])
    originals = {s: dict(rc.xrange(s)) for s in sources}
    settings = load_settings(None, [
        f"redis.url={redis_cluster.url}", f"report.path={tmp_path / 'reports'}",
        "streams.match=*", "claim.min_idle_ms=600000", "claim.max_deliveries=5",
        "dead_letter.stream=CDL{{eu}}", "handler.path=tests.support.handlers:verify_or_fail"])
    summary = run(spark, settings)
    letters = {}
    for entry_id, fields in rc.xrange("CDL{eu}"):
        source, original = (fields[b"x-original-stream"].decode(),
                            fields[b"x-original-id"].decode())
        letters[entry_id] = (source, original)
        before = originals[source][original.encode()]
        assert {k: fields.get(k) for k in before} == before  # binary fields, byte for byte
        assert fields[b"x-original-group"] == GROUP.encode()
    assert sorted(letters.values()) == sorted((s, i) for s in sources
                                              for i in dead_lettered(seeded, s))
    assert summary.health_after["dead_letter_length"] == len(letters)
    for source, original in letters.values():  # moved: no longer pending
        assert original not in pel(rc, source, GROUP)
