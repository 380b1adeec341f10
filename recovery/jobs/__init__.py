"""The spark-submit entry points, shipped inside the package: ``spark-submit
<this directory>/recover.py ...`` works from an installed wheel as ``jobs/recover.py`` does
from a checkout; the ``redis-stream-recovery`` command (:mod:`recovery.jobs.submit`) submits them.
This package imports nothing: each module puts the installed PySpark first before anything
imports pyspark."""
