"""Offline compaction's storage side: snapshots of a log's segments for the cleaner, the manifest, the
install and swap of cleaned segments, the cleaner checkpoint. Imports ``log``, ``dirs`` and below."""
