"""seglog cluster status / rebalance and seglog partition move against real service processes
and a real etcd (conftest.py): an added instance gets its share by a rebalance (planned with
--dry-run first), a move to an unknown instance fails in one line, a killed instance's partition
shows offline until `partition move --unclean` gives it to a live one."""

from __future__ import annotations

import json
import signal

import pytest

from seglog import Admin, Producer
from seglog_cli import main
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _start, _until, services
from tests.support.integration_helpers import ServiceProcess

__all__ = ["services"]

TOPIC = "spread"


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _status(capsys, server: str) -> dict:
    code, out, err = _cli(capsys, "cluster", "status", "--server", server, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _stored_bytes(service, partition: int) -> int:
    return sum(path.stat().st_size for path in (service.data_dirs[0] / f"{TOPIC}-{partition}").glob("*.log"))


def _counts(status: dict) -> dict[str, int]:
    return {i["instance_id"]: i["partition_count"] for i in status["instances"] if i["alive"]}


@pytest.mark.slow  # three service processes, one move, a killed instance's lease to expire: ~20 s
def test_status_rebalance_and_moves_from_the_command_line(tmp_path, etcd, services, capsys, closing):
    cluster = f"cli{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    admin = closing(Admin(a.address))
    _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"}, what="a sees b")
    admin.create_topic(TOPIC, partitions=4)
    c = _start(tmp_path, "c", _cluster_args(etcd, cluster, "c"))
    services.append(c)
    _until(lambda: _counts(_status(capsys, a.address)) == {"a": 2, "b": 2, "c": 0}, what="c seen, owning none")
    with Admin(c.address) as at_c:
        _until(lambda: TOPIC in {t.topic for t in at_c.list_topics()}, what="c holding the topic")

    with Producer(a.address, linger_ms=1) as producer:
        for future in [producer.send(TOPIC, b"r", partition=p) for p in range(4) for _ in range(20)]:
            future.result(timeout=30)
    assert _stored_bytes(b, 3) > 0

    code, out, _ = _cli(capsys, "cluster", "status", "--server", a.address)
    assert code == 0 and f"cluster {cluster}, as instance a sees it" in out
    assert "offline partitions: none" in out and "moves in progress: none" in out

    code, out, _ = _cli(capsys, "cluster", "rebalance", "--dry-run", "--server", a.address)
    assert code == 0 and out.splitlines() == [f"would move {TOPIC}:3 b -> c", "1 move(s) planned"]
    assert _counts(_status(capsys, a.address)) == {"a": 2, "b": 2, "c": 0}  # nothing moved
    code, out, _ = _cli(capsys, "cluster", "rebalance", "--server", a.address)
    assert code == 0 and f"moving {TOPIC}:3 b -> c" in out and "moved at epoch 1" in out
    assert _counts(_status(capsys, a.address)) == {"a": 2, "b": 1, "c": 1}
    _until(lambda: _stored_bytes(b, 3) == 0, what="the source's copy dropped after the move")
    assert _stored_bytes(c, 3) > 0
    code, out, _ = _cli(capsys, "cluster", "rebalance", "--server", a.address)
    assert code == 0 and out.strip() == "balanced: no move needed"

    code, out, _ = _cli(capsys, "partition", "move", TOPIC, "0", "--to", "b", "--server", c.address, "--format", "json")
    assert code == 0 and json.loads(out)["to"] == "b" and json.loads(out)["epoch"] == 1
    code, _, err = _cli(capsys, "partition", "move", TOPIC, "0", "--to", "nowhere", "--server", a.address)
    assert code == 1 and "'nowhere' is not known" in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli(capsys, "partition", "move", TOPIC, "0", "--unclean", "--abort", "--server", a.address)
    assert code == 1 and "--unclean needs --to INSTANCE" in err

    # c killed: its partition offline, then given to a uncleanly, from the command line.
    c.signal(signal.SIGKILL)
    c.wait()
    _until(lambda: _status(capsys, a.address)["offline_partitions"], what="c's partition offline")
    offline = _status(capsys, a.address)["offline_partitions"]
    assert [(o["topic"], o["partition"], o["owner_id"]) for o in offline] == [(TOPIC, 3, "c")]
    code, out, _ = _cli(capsys, "partition", "move", TOPIC, "3", "--to", "a", "--unclean", "--server", b.address)
    assert code == 0 and "taken over UNCLEANLY by a from c at epoch 2" in out
    _until(lambda: not _status(capsys, b.address)["offline_partitions"], what="no partition offline")
    # c back with its data dir: its copy of a partition a owns at a later epoch goes at start.
    c.start()
    _until(lambda: _stored_bytes(c, 3) == 0, what="c's stale copy dropped at start")
    admin.close()


def test_cluster_commands_against_a_single_process_fail_in_one_line(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    service = ServiceProcess(tmp_path, [data], []).start()
    try:
        code, _, err = _cli(capsys, "cluster", "status", "--server", service.address)
        assert code == 1 and "needs cluster mode (--etcd)" in err and len(err.strip().splitlines()) == 1
        code, _, err = _cli(capsys, "cluster", "rebalance", "--server", service.address)
        assert code == 1 and "not a cluster" in err
    finally:
        service.stop()
