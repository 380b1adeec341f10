"""Dead letters as data (``jobs/dead_letters.py``, ``recovery.dead_letters``): the dead-letter
streams read into a DataFrame, grouped by cause and by error signature, their trend across
runs, and warnings on their length and age. Read-only unless the opt-in retention is on.

- ``read``: executor side, pages of XRANGE per dead-letter stream into DEAD_LETTER rows (never
  imports the driver side);
- ``views``: pure DataFrame logic: typed times, error signatures, the grouped views;
- ``run``: the orchestration; ``trend``: the health snapshots across runs; ``report``: where
  its views go, its JSON summary and log tables;
- ``retention``: the opt-in trim of letters past ``dead_letters.max_age_s`` / ``max_length``.

Elsewhere: the ``[dead_letters]`` section in ``recovery.settings.dead_letters``, the command
line in ``recovery.jobs.dead_letters``, each dead-letter stream's type, length and oldest
entry (and the warnings they raise, shared with the recovery run) in
``recovery.targets.dead_letter_streams``.
"""
