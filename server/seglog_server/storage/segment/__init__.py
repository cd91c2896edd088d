"""One segment (``LogSegment``: its .log, .index and .timeindex), its checks and recovery, and the
sorted map and descriptor budget of a log's segments. Imports ``format`` and ``base``."""
