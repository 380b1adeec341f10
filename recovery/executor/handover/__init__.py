"""The hand-over on an executor: claimed entries routed (:mod:`.routed`), made ready
(:mod:`.ready`), dead-lettered (:mod:`.dead_letter`), re-processed as ``reprocess.mode``
says (:mod:`.modes`: by the handler under a lease, requeued or reassigned; :mod:`.apply`
runs the steps in order), and acked (:mod:`.lease`)."""
