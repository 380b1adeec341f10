"""Redrive: dead letters go back to their source streams (``jobs/redrive.py``), on the
driver, inside Redis."""
