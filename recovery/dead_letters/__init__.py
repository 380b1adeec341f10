"""Dead letters as data (``jobs/dead_letters.py``, ``recovery.dead_letters``): the dead-letter
streams read into a DataFrame, grouped by cause and by error signature, their trend across
runs, and warnings on their length and age. Read-only unless the opt-in retention is on.

- ``read``: executor side, pages of XRANGE per dead-letter stream into DEAD_LETTER rows (never
  imports the driver side);
- ``stats``: driver side, each dead-letter stream's type, length and oldest entry, and the
  warnings they raise (also used by the recovery run);
- ``views``: pure DataFrame logic: typed times, error signatures, the grouped views;
- ``run``: the orchestration; ``trend``: the health snapshots across runs;
- ``retention``: the opt-in trim of letters past ``dead_letters.max_age_s`` / ``max_length``;
- ``settings``: the ``[dead_letters]`` section; ``cli``: the command line.
"""
