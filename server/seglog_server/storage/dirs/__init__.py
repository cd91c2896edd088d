"""A log directory (its checkpoints, clean-shutdown marker, producer-id block, offline state) and the
topic map over the directories. Imports ``producers`` and below; never ``log``, which sits beside it."""
