"""The hand-over on an executor: claimed entries routed (:mod:`.routed`), dead-lettered,
re-processed, requeued or reassigned (:mod:`.apply`) under a lease, and acked (:mod:`.lease`)."""
