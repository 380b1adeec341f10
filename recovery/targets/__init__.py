"""What a job works on, found on the driver: the keys the settings select (:mod:`.keys`) and
the dead-letter streams they point at (:mod:`.dead_letter_streams`)."""
