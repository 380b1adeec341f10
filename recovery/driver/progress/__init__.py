"""Progress of a run on the driver, read from Redis itself while the Spark stages run: the
reporter that ticks (:mod:`.reporter`), the readings (:mod:`.read`), what they add up to
(:mod:`.state`), which units a tick reads (:mod:`.frontier`) and the lines' wording
(:mod:`.lines`)."""
