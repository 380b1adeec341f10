"""A job's metrics, pushed to a Prometheus Pushgateway at the end of each run: what the
series are (``families``), the state read after the run (``after``), the push (``push``)."""
