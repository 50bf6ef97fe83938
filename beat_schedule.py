"""The periodic maintenance schedule, as plain data (DESIGN.md top-level table).

Maps a beat entry name to the task it runs and its interval in seconds. The workers
issue fills it (recover, temporal review, expiry, retention, queue maintenance); the
Celery app turns it into ``beat_schedule`` entries.
"""

from __future__ import annotations

SCHEDULE: dict[str, dict[str, object]] = {}
