"""The driver side: discovery, the run orchestrated, group health, progress, the command line.

Imports nothing: Spark's Python daemon is ``recovery.spark.pyspark_path``, which must run
before anything imports ``pyspark``. Executors never import this package
(tests/unit/test_house.py).
"""
