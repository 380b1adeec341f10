"""The jobs, one command class per job (``recovery.jobs.job_command.JobCommand``, the steps
they share): :mod:`.recover`, :mod:`.redrive`, :mod:`.dead_letters`. Each job's module is
also its spark-submit file, shipped inside the package: ``spark-submit <this
directory>/recover.py ...`` works from an installed wheel as ``jobs/recover.py`` does from a
checkout; the ``redis-stream-recovery`` command (:mod:`recovery.cli.main`) submits them.
This package imports nothing: each job module puts the installed PySpark first before
anything imports pyspark. Spark's driver starts with this directory first on its path, so a
module here shadows a user's top-level module of its name: the names are the jobs' own."""
