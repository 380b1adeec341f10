"""Settings of every job, one pydantic package validated on the driver (executors never
import it): each ``[section]`` a model on one base (:mod:`recovery.settings.base`), the
recovery run's model and its loader in :mod:`recovery.settings.model`."""
