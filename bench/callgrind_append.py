"""Instruction counts of Log.append under callgrind (repeatable on a loaded machine): plain
batches against idempotent ones (10 x 100-byte records each).

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.base .venv/bin/python bench/callgrind_append.py plain 2000 buildonly
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.plain .venv/bin/python bench/callgrind_append.py plain 2000
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.idem .venv/bin/python bench/callgrind_append.py idem 2000

Instructions per append = (the run's "Collected" - the buildonly run's) / 2000: the buildonly run
does everything else (imports, batch building, Log.load and close). Set PYTHONPATH to another
tree's client and server directories to count an older version with the same script.
"""

import random
import sys
import tempfile

from seglog.records import RecordBatchBuilder
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.base.log_config import LogConfig

mode, count = sys.argv[1], int(sys.argv[2])


def build(sequence: int) -> bytes:
    if mode == "plain":
        builder = RecordBatchBuilder()
    else:
        builder = RecordBatchBuilder(producer_id=1000, producer_epoch=0, base_sequence=sequence)
    builder.extend([None] * 10, [b"x" * 100] * 10, 1_700_000_000_000)
    return builder.build()


batches = [build(i * 10) for i in range(count)]
with tempfile.TemporaryDirectory() as directory:
    log = Log.load(directory, "b", 0, LogConfig(), had_clean_shutdown=True, flush_scheduler=lambda t: None,
                   rng=random.Random(1))
    if len(sys.argv) < 4:
        for data in batches:
            log.append(data)
    log.close()
