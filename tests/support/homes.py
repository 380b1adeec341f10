"""Where the tests of a module live when not at its own place.

A module ``recovery/<pkg>/<mod>.py`` is tested at ``tests/unit/<pkg>/test_<mod>.py`` (a
package's ``__init__.py`` that holds code: ``tests/unit/<parent>/test_<pkg>.py``), which
imports it. A module whose tests are elsewhere is named here, with the test module and how
that test reaches it, one of:

- ``imports it``: the test module imports the module (tested with its neighbours, in a test
  named by concern, or in a whole run);
- ``through recovery.x.y``: the test module reaches ``recovery.x.y`` (its imports, and theirs),
  which imports the module: tested only through that neighbour;
- ``runs it: python -m recovery``: the test runs the module as a process.

``tests/unit/test_house.py`` holds the rule: a module at its own place is not named here,
every other one is, and each "how" holds. A module that gains a test file of its own leaves
this table."""

from __future__ import annotations

# module -> (test module, how it reaches the module)
TESTED_ELSEWHERE: dict[str, tuple[str, str]] = {
    "recovery/__init__.py": ("tests/unit/test_public_api.py", "imports it"),
    "recovery/__main__.py": ("tests/unit/cli/test_precheck.py", "runs it: python -m recovery"),
    "recovery/cli/console.py": ("tests/unit/console/test_app.py", "imports it"),
    "recovery/cli/init_command.py":
        ("tests/integration/attacks/test_attack_init.py", "imports it"),
    "recovery/cli/main.py": ("tests/unit/cli/test_init.py", "imports it"),
    "recovery/cli/routes.py": ("tests/unit/cli/test_in_process.py", "imports it"),
    "recovery/console/act.py": ("tests/unit/console/test_app.py", "through recovery.console.app"),
    "recovery/console/audit.py":
        ("tests/unit/console/test_users.py", "through recovery.console.serve"),
    "recovery/console/counts.py":
        ("tests/unit/console/test_users.py", "through recovery.console.state"),
    "recovery/console/guard.py": ("tests/unit/console/test_app.py", "through recovery.console.app"),
    "recovery/console/letters.py": ("tests/unit/console/test_browse.py", "imports it"),
    "recovery/console/links.py": ("tests/unit/console/test_app.py", "through recovery.console.app"),
    "recovery/console/overview.py":
        ("tests/unit/console/test_app.py", "through recovery.console.pages"),
    "recovery/console/pages.py": ("tests/unit/console/test_app.py", "through recovery.console.app"),
    "recovery/console/queries.py":
        ("tests/unit/console/test_app.py", "through recovery.console.act"),
    "recovery/console/sessions.py":
        ("tests/unit/console/test_users.py", "through recovery.console.state"),
    "recovery/console/state.py": ("tests/unit/console/test_users.py", "imports it"),
    "recovery/console/tasks.py":
        ("tests/unit/console/test_users.py", "through recovery.console.state"),
    "recovery/dead_letters/report.py": ("tests/unit/dead_letters/test_read.py", "imports it"),
    "recovery/dead_letters/trend.py": ("tests/unit/dead_letters/test_read.py", "imports it"),
    "recovery/driver/handler_choice.py":
        ("tests/integration/test_end_to_end.py", "through recovery.driver.job"),
    "recovery/driver/health.py": ("tests/unit/driver/progress/test_reporter.py", "imports it"),
    "recovery/driver/job.py": ("tests/integration/test_end_to_end.py", "imports it"),
    "recovery/driver/ordered.py": ("tests/unit/driver/test_plan.py", "through recovery.driver.job"),
    "recovery/driver/passes.py":
        ("tests/integration/test_end_to_end.py", "through recovery.driver.job"),
    "recovery/driver/progress/frontier.py":
        ("tests/unit/driver/progress/test_reporter.py",
         "through recovery.driver.progress.reporter"),
    "recovery/driver/progress/lines.py":
        ("tests/unit/driver/progress/test_reporter.py",
         "through recovery.driver.progress.reporter"),
    "recovery/driver/progress/read.py":
        ("tests/unit/driver/progress/test_reporter.py",
         "through recovery.driver.progress.reporter"),
    "recovery/driver/progress/state.py":
        ("tests/unit/driver/progress/test_reporter.py", "imports it"),
    "recovery/driver/run_ids.py": ("tests/unit/driver/test_plan.py", "through recovery.driver.job"),
    "recovery/executor/claim/by_plan.py": ("tests/unit/driver/test_plan.py", "imports it"),
    "recovery/executor/key_buckets.py": ("tests/unit/driver/test_balance.py", "imports it"),
    "recovery/executor/claim/gather.py":
        ("tests/unit/executor/claim/test_first_steps.py", "imports it"),
    "recovery/executor/claim/journaled.py":
        ("tests/unit/executor/test_partitions.py", "through recovery.executor.partitions"),
    "recovery/executor/claim/left_counts.py":
        ("tests/unit/executor/test_partitions.py", "through recovery.executor.partitions"),
    "recovery/executor/claim/shared.py":
        ("tests/unit/executor/claim/test_shared_claim.py", "through recovery.executor.claim.loop"),
    "recovery/executor/claim/walk.py":
        ("tests/unit/executor/claim/test_shared_claim.py", "through recovery.executor.claim.loop"),
    "recovery/executor/claimed.py": ("tests/unit/executor/test_packing.py", "imports it"),
    "recovery/executor/faults.py":
        ("tests/unit/executor/test_partitions.py", "through recovery.executor.partitions"),
    "recovery/executor/handover/dead_letter.py":
        ("tests/integration/test_odd_fields.py", "imports it"),
    "recovery/executor/handover/lease.py":
        ("tests/unit/executor/handover/test_apply.py", "imports it"),
    "recovery/executor/handover/resent.py":
        ("tests/integration/test_resent_dead_letters.py", "imports it"),
    "recovery/executor/handover/modes/base.py":
        ("tests/unit/executor/handover/test_modes.py", "imports it"),
    "recovery/executor/handover/modes/handler.py":
        ("tests/unit/executor/handover/test_modes.py", "imports it"),
    "recovery/executor/handover/modes/reassign.py":
        ("tests/unit/executor/handover/test_modes.py", "imports it"),
    "recovery/executor/handover/ordered.py":
        ("tests/integration/test_order.py", "through recovery.executor.ordered"),
    "recovery/executor/handover/ready.py":
        ("tests/integration/test_vanished_units.py", "imports it"),
    "recovery/executor/ordered.py": ("tests/integration/test_order.py", "imports it"),
    "recovery/executor/survey.py": ("tests/unit/executor/test_tally.py", "imports it"),
    "recovery/jobs/dead_letters.py": ("tests/unit/jobs/test_entry_points.py", "imports it"),
    "recovery/jobs/job_command.py": ("tests/unit/cli/test_in_process.py", "imports it"),
    "recovery/jobs/job_options.py":
        ("tests/unit/jobs/test_entry_points.py", "through recovery.jobs.job_command"),
    "recovery/jobs/recover.py": ("tests/unit/jobs/test_entry_points.py", "imports it"),
    "recovery/jobs/redrive.py": ("tests/unit/jobs/test_entry_points.py", "imports it"),
    "recovery/jobs/submit.py": ("tests/unit/jobs/test_entry_points.py", "imports it"),
    "recovery/metrics/dead_letter_jobs.py":
        ("tests/integration/attacks/test_attack_monitoring.py", "imports it"),
    "recovery/metrics/families.py": ("tests/unit/metrics/test_alerts.py", "imports it"),
    "recovery/metrics/push.py": ("tests/integration/test_metrics_outcomes.py", "imports it"),
    "recovery/metrics/recovery_run.py":
        ("tests/integration/test_dead_letter_targets.py", "imports it"),
    "recovery/params.py": ("tests/unit/test_schemas.py", "imports it"),
    "recovery/redis_io/claim_due.py":
        ("tests/unit/executor/claim/test_shared_claim.py", "through recovery.executor.claim.loop"),
    "recovery/redis_io/cluster.py": ("tests/unit/redis_io/test_tls.py", "imports it"),
    "recovery/redis_io/features.py":
        ("tests/integration/attacks/test_attack_delete_acked.py", "imports it"),
    "recovery/redis_io/held_keys.py": ("tests/unit/redis_io/test_key_holds.py", "imports it"),
    "recovery/redis_io/letters.py": ("tests/unit/console/test_moves.py", "imports it"),
    "recovery/redis_io/own_letters.py": ("tests/integration/test_resent_dead_letters.py",
                                         "through recovery.executor.handover.resent"),
    "recovery/redis_io/redis_conn.py": ("tests/unit/redis_io/test_round_trips.py", "imports it"),
    "recovery/redis_io/redrive.py":
        ("tests/unit/redrive/test_run.py", "through recovery.redrive.run"),
    "recovery/redis_io/scripts.py": ("tests/unit/redis_io/test_key_holds.py", "imports it"),
    "recovery/redis_io/split_cursors.py": ("tests/unit/redis_io/test_run_ids.py", "imports it"),
    "recovery/redis_io/stream_full.py":
        ("tests/unit/redis_io/test_run_ids.py", "through recovery.driver.discovery"),
    "recovery/redis_io/trim.py":
        ("tests/unit/dead_letters/test_retention_letters.py", "imports it"),
    "recovery/redrive/report.py":
        ("tests/unit/redrive/test_run.py", "through recovery.redrive.run"),
    "recovery/report/after_run.py":
        ("tests/integration/test_metrics.py", "through recovery.metrics.recovery_run"),
    "recovery/report/json_line.py":
        ("tests/unit/report/test_summary.py", "through recovery.report.summary"),
    "recovery/report/run_report.py": ("tests/unit/report/test_worker_files.py", "imports it"),
    "recovery/report/signature_rules.py": ("tests/unit/report/test_signatures.py", "imports it"),
    "recovery/report/wording.py":
        ("tests/unit/report/test_summary.py", "through recovery.report.summary"),
    "recovery/settings/base.py":
        ("tests/unit/settings/test_model.py", "through recovery.settings.redis"),
    "recovery/settings/claim.py":
        ("tests/unit/settings/test_model.py", "through recovery.settings.model"),
    "recovery/settings/dead_letters.py":
        ("tests/unit/settings/test_model.py", "through recovery.settings.model"),
    "recovery/settings/metrics.py": ("tests/integration/test_metrics_outcomes.py", "imports it"),
    "recovery/settings/order.py":
        ("tests/unit/settings/test_model.py", "through recovery.settings.model"),
    "recovery/settings/redis.py": ("tests/unit/settings/test_model.py", "imports it"),
    "recovery/settings/redrive.py":
        ("tests/unit/settings/test_model.py", "through recovery.settings.model"),
    "recovery/settings/reference.py": ("tests/unit/test_docs_truth.py", "imports it"),
    "recovery/settings/sections.py":
        ("tests/unit/settings/test_model.py", "through recovery.settings.model"),
    "recovery/spark/properties.py":
        ("tests/unit/spark/test_local.py", "through recovery.spark.local"),
    "recovery/spark/session.py": ("tests/unit/spark/test_local.py", "imports it"),
    "recovery/starter/__init__.py": ("tests/unit/cli/test_init.py", "imports it"),
    "recovery/targets/dead_letter_streams.py":
        ("tests/unit/dead_letters/test_run.py", "imports it"),
    "recovery/testing/backlog.py": ("tests/unit/cli/test_in_process.py", "imports it"),
}
