"""``python -m seglog_spark SNAPSHOT_DIR|s3://BUCKET/PREFIX/ [--s3-endpoint URL] [--master URL]
[--dry-run] [--map-bytes N]``: clean one snapshot (a directory, or one in an object store) with the
PySpark job and print the result JSON on stdout (one line).  spark-submit can
run this file directly.  Exit status 2 with a one-line message when the snapshot is refused."""

from __future__ import annotations

import argparse
import json
import sys

from seglog_spark.cleaning import DEFAULT_MAP_BYTES, DEFAULT_RANGE_BYTES, DEFAULT_SHARD_COUNT
from seglog_spark.errors import CleanerError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m seglog_spark", description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot_dir", help="a snapshot directory holding manifest.json, or its s3://BUCKET/PREFIX/ URL")
    parser.add_argument("--s3-endpoint", default=None, metavar="URL",
                        help="an S3-compatible server for an s3:// snapshot (credentials: the AWS environment)")
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    parser.add_argument("--dry-run", action="store_true", help="report what cleaning would reclaim, write nothing")
    parser.add_argument("--map-bytes", type=int, default=DEFAULT_MAP_BYTES, help="offset-map bytes per key shard")
    parser.add_argument("--shards", type=int, default=DEFAULT_SHARD_COUNT, help="key shards (one offset map each)")
    parser.add_argument("--range-bytes", type=int, default=DEFAULT_RANGE_BYTES, help="bytes of log per scan task")
    parser.add_argument("--engine", choices=("spark", "python"), default="spark", help="python: the single-process baseline")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    options = {"map_bytes": args.map_bytes, "dry_run": args.dry_run, "shard_count": args.shards, "range_bytes": args.range_bytes}
    try:
        store = None
        if args.snapshot_dir.startswith("s3://"):
            from seglog_spark.object_io import StoreSnapshot

            store = StoreSnapshot.parse(args.snapshot_dir, args.s3_endpoint)
        if args.engine == "python":
            from seglog_spark.cleaner_local import clean_snapshot as clean_local

            if store is not None:
                from seglog_spark.object_io import clean_downloaded

                result = clean_downloaded(store, clean_local, **options)
            else:
                result = clean_local(args.snapshot_dir, **options)
        else:
            from seglog_spark.session import build_session

            spark = build_session(args.master)
            try:
                if store is not None:
                    from seglog_spark.job_store import clean_store_snapshot

                    result = clean_store_snapshot(spark, store, **options)
                else:
                    from seglog_spark.job import clean_snapshot

                    result = clean_snapshot(spark, args.snapshot_dir, **options)
            finally:
                spark.stop()
    except CleanerError as exc:
        print(f"seglog_spark: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
