"""The persistent job store: typed tables, migrations, sessions, and the queries the API and controller share."""

from scheduler.live.store.db import Store, corral_home, database_url
from scheduler.live.store.models import JobState, JobType, RestartPolicy

__all__ = ["JobState", "JobType", "RestartPolicy", "Store", "corral_home", "database_url"]
