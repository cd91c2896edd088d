"""Pure on-disk formats: the offset and time indexes over a shared search, file records and their
timestamps, the checkpoint files, the clean-shutdown marker, topic metadata and the lost-offsets file.
Imports only ``base``."""
