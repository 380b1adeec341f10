"""The claim on an executor: each unit's walk over its PEL, step by step (:mod:`.walk`,
:mod:`.loop`), the first steps of many small units in one round trip, a split unit's shared
cursor (:mod:`.shared`), a plan's entries claimed by ID (:mod:`.by_plan`), the backoff
schedule and the rate cap, and how steps reach the hand-over (gathered or journaled)."""
