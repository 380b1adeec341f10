"""The dead-letter console (``redis-stream-recovery console``): a small web application over
the dead-letter streams the config selects, reading Redis directly, no Spark.

- ``users``, ``sessions``, ``guard``: who may log in, the signed session and its CSRF token,
  the rules every request passes (login, role, CSRF, security headers);
- ``letters``: a letter as shown (UTF-8 or hex, cut with its size) and the filters;
- ``browse``, ``overview``, ``counts``: pages of letters by ID, the overview read live, the
  counts by cause from a background scan that says how fresh it is;
- ``moves``, ``tasks``, ``audit``: a letter back to its source through the redrive's script,
  the background tasks with progress, the audit log;
- ``queries``, ``pages``, ``act``, ``app``, ``state``, ``serve``: the HTTP side.

Its Redis commands live in ``recovery.redis_io.letters``; its command line in
``recovery.cli.console``.
"""
