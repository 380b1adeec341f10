"""The run's report: per-entry Parquet files (Spark's writer, or the Python workers' own),
the per-stream table and the JSON summary."""
