"""seglog_spark: offline cleaning (log compaction) of seglog snapshots, Kafka's LogCleaner
semantics (kafka-storage.md section 6), on Spark or in one process.

- offset_map.SkimpyOffsetMap: Kafka's fixed-memory digest -> offset map (no Spark needed);
- cleaner_local.clean_snapshot(snapshot_dir, ...): the single-process baseline;
- job.clean_snapshot(spark, snapshot_dir, ...): the PySpark job on a SparkSession;
- session.build_session(master, ...): a SparkSession set up for this machine;
- ``python -m seglog_spark SNAPSHOT_DIR [--master URL] [--dry-run] [--map-bytes N]``.

Importing the package imports no pyspark; job.py and session.py do.
"""

from .errors import CleanerError, SnapshotError, UnsupportedBatchError
from .offset_map import SkimpyOffsetMap

__all__ = ["CleanerError", "SkimpyOffsetMap", "SnapshotError", "UnsupportedBatchError"]
