"""The alerting rules users paste (conf/alerts.yml), checked and unit-tested with the real
``promtool`` (Debian's ``prometheus`` package; .ci/run installs it): every rule has a test
where it fires and one where it stays quiet (tests/alerts/alerts_test.yml), and names only
metrics the jobs push (recovery.metrics.families)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from recovery.metrics.families import PREFIX
from tests.support.pushgateway import pushed_names

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "conf" / "alerts.yml"
RULE_TESTS = ROOT / "tests" / "alerts" / "alerts_test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "no promtool: apt-get install prometheus (.ci/run does)"
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def test_promtool_accepts_the_rules() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_rule_passes_its_promtool_tests() -> None:
    done = promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_rule_is_tested_firing_and_quiet() -> None:
    """Each alert of the rules file has an ``alertname`` case that expects it and one that
    expects nothing."""
    alerts = re.findall(r"^\s*- alert: (\w+)", RULES.read_text(), re.MULTILINE)
    cases = re.findall(r"alertname: (\w+)\n\s*exp_alerts:( \[\])?", RULE_TESTS.read_text())
    assert alerts and {name for name, empty in cases if not empty} == set(alerts)
    assert {name for name, empty in cases if empty} >= set(alerts) - {
        "RedisStreamRecoveryHandlerFailing"}  # its quiet case: instance b beside a


@pytest.mark.parametrize("path", [RULES, RULE_TESTS], ids=lambda p: p.name)
def test_the_rules_name_only_metrics_the_jobs_push(path: Path) -> None:
    named = set(re.findall(rf"\b{PREFIX}\w+", path.read_text()))
    assert named and named <= pushed_names(), named - pushed_names()
