"""Tooling for trying the job out and testing it, apart from the job itself: throwaway
Redis and Valkey servers on free ports (``local_redis``) and stuck backlogs seeded with real
commands (``backlog``). Used by the demo, the notebook, the tests and the benchmark; the job
never imports it."""
