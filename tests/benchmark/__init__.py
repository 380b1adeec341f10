"""Benchmark of issue 3: recover S streams x N stuck entries, naive loop vs best redis-py loop
vs the Spark job, verified in Redis. Run ``python -m tests.benchmark.run --help``.

Modules: ``seed`` (the backlog, ``lua/seed_stuck.lua``), ``loops`` (the two single-process
contenders), ``handlers`` (the slow handler of ``--handler-delay-ms``), ``spark_job`` and
``spark_log`` (the job via spark-submit and its logs), ``measure`` (Redis counters, process
memory), ``verify`` (exactly-once checks in Redis), ``contenders`` (one measured run),
``report`` (tables), ``targets`` (the issues' targets), ``run`` (the command line).
"""
