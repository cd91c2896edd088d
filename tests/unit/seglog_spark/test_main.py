"""``python -m seglog_spark``: the result JSON on stdout; a refused snapshot exits 2 with one line."""

import json
import subprocess
import sys

from tests.support.snapshot_workloads import make_snapshot


def run(*args):
    return subprocess.run([sys.executable, "-m", "seglog_spark", *args], capture_output=True, text=True, timeout=600)


def test_prints_the_result_it_wrote(tmp_path):
    make_snapshot(str(tmp_path), [(b"k%d" % (i % 3), b"v") for i in range(30)])
    finished = run(str(tmp_path), "--engine", "python", "--map-bytes", "16384")
    assert finished.returncode == 0, finished.stderr
    result = json.loads(finished.stdout)
    assert result == json.load(open(tmp_path / "result.json"))
    assert result["stats"]["records_kept"] == 3 and result["stats"]["engine"] == "python"


def test_a_refused_snapshot_exits_2_with_one_line(tmp_path):
    finished = run(str(tmp_path), "--engine", "python")
    assert finished.returncode == 2
    assert finished.stdout == ""
    assert finished.stderr.startswith("seglog_spark: cannot read") and finished.stderr.count("\n") == 1
