"""Where the job meets Spark itself: the installed PySpark for its Python processes
(:mod:`.pyspark_path`, the workers' daemon module: this package imports nothing), local
sessions, a submitted job's session, and Spark's errors mapped to the job's own."""
