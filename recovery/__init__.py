"""Recover stuck messages from Redis Streams consumer groups with PySpark."""

__version__ = "0.1.0"
