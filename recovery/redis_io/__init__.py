"""Redis I/O: clients, one function per command, the Lua scripts (``lua/``), the typed
errors Redis replies turn into, and the dead-letter stream names.

Used on the driver and on executors alike, so it never imports the driver side
(``recovery.driver``, ``recovery.settings.model``, pydantic; tests/unit/test_house.py).
"""
