"""What runs in Spark's Python workers: the partition functions, the claim, the hand-over
(route, dead-letter, handler, lease, ack) and the counts they report.

Never imports the driver side (``recovery.driver``, ``recovery.settings``, pydantic): only
``recovery.params`` travels (tests/unit/test_house.py).
"""
