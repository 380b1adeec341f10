"""A job's metrics, pushed to a Prometheus Pushgateway at the end of each run: what the
series are (``families``), the push (``push``); the state read after the run lives in
``recovery.report.after_run``."""
