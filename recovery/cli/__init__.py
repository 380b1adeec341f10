"""The command lines of the three jobs (``jobs/*.py`` call them): the plumbing they share
(:mod:`.common`), and one module per job."""
