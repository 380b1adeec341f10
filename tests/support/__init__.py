"""What the tests share: seeded backlogs, servers, clusters, TLS material, job processes,
handlers (imported on executors as ``tests.support.handlers:...``) and checks of Redis after
a run. No tests here: test modules import from this package, never from each other."""
