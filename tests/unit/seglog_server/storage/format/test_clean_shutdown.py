"""The .kafka_cleanshutdown marker file (content, existence, durable delete)."""

import json
import os

from seglog_server.storage.format.clean_shutdown import CLEAN_SHUTDOWN_FILE_NAME, CleanShutdownFile
from seglog_server.storage.base.fs import FileSystem


def test_marker_name_is_kafkas():
    assert CLEAN_SHUTDOWN_FILE_NAME == ".kafka_cleanshutdown"


def test_write_stores_version_and_broker_epoch_as_compact_json(tmp_path):
    marker = CleanShutdownFile(str(tmp_path))
    marker.write(17)
    raw = (tmp_path / CLEAN_SHUTDOWN_FILE_NAME).read_bytes()
    assert raw == b'{"version":0,"brokerEpoch":17}'
    assert json.loads(raw) == {"version": 0, "brokerEpoch": 17}


def test_write_defaults_to_unknown_epoch_minus_one(tmp_path):
    marker = CleanShutdownFile(str(tmp_path))
    marker.write()
    assert marker.read_broker_epoch() == -1


def test_exists_follows_write_and_delete(tmp_path):
    marker = CleanShutdownFile(str(tmp_path))
    assert not marker.exists()
    marker.write(3)
    assert marker.exists()
    assert marker.delete() is True
    assert not marker.exists()
    assert marker.delete() is False


def test_write_leaves_no_tmp_file(tmp_path):
    CleanShutdownFile(str(tmp_path)).write(1)
    assert os.listdir(tmp_path) == [CLEAN_SHUTDOWN_FILE_NAME]


def test_read_broker_epoch_of_kafka_written_marker(tmp_path):
    (tmp_path / CLEAN_SHUTDOWN_FILE_NAME).write_text('{"version": 0, "brokerEpoch": 123456}')
    assert CleanShutdownFile(str(tmp_path)).read_broker_epoch() == 123456


def test_unreadable_content_means_unknown_epoch_but_still_exists(tmp_path):
    (tmp_path / CLEAN_SHUTDOWN_FILE_NAME).write_bytes(b"")  # Kafka 0.8-era markers are empty
    marker = CleanShutdownFile(str(tmp_path))
    assert marker.exists()
    assert marker.read_broker_epoch() is None
    hostile = (b"[" * 2000, b'{"brokerEpoch": ' + b"9" * 4000 + b"}", b'{"brokerEpoch": 1e400}',
               b'{"brokerEpoch": NaN}', b'{"brokerEpoch": 9223372036854775808}')  # once RecursionError first
    for content in (b"not json", b"[1]", b'{"version":0}', b'{"brokerEpoch":true}', b"\xff", *hostile):
        (tmp_path / CLEAN_SHUTDOWN_FILE_NAME).write_bytes(content)
        assert marker.read_broker_epoch() is None


def test_read_broker_epoch_of_missing_marker_is_none(tmp_path):
    assert CleanShutdownFile(str(tmp_path)).read_broker_epoch() is None


class _RecordingFs(FileSystem):
    def __init__(self):
        self.dir_fsyncs = []

    def fsync_dir(self, path):
        self.dir_fsyncs.append(path)
        super().fsync_dir(path)


def test_delete_fsyncs_the_directory_so_the_marker_cannot_come_back(tmp_path):
    fs = _RecordingFs()
    marker = CleanShutdownFile(str(tmp_path), fs=fs)
    marker.write(1)
    fs.dir_fsyncs.clear()
    marker.delete()
    assert fs.dir_fsyncs == [str(tmp_path)]
