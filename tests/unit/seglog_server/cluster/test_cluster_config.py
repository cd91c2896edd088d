"""ClusterConfig: defaults, the fencing deadline's arithmetic, one-line errors naming the setting,
and the instance id a data directory carries across restarts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import seglog_server.cluster as cluster
from seglog_server.cluster import ClusterConfig, ClusterConfigError, ClusterKeys, instance_id_for
from seglog_server.cluster.instance_identity import INSTANCE_ID_FILE_NAME
from seglog_server.cluster.errors import MalformedRecordError


def config(**overrides) -> ClusterConfig:
    settings = dict(etcd_endpoints=("http://127.0.0.1:2379",), advertise="127.0.0.1:50551", instance_id="a")
    settings.update(overrides)
    return ClusterConfig(**settings)


def test_cluster_all_is_sorted_and_every_name_resolves():
    assert cluster.__all__ == sorted(cluster.__all__, key=lambda name: (not name.isupper(), name))
    for name in cluster.__all__:
        assert getattr(cluster, name) is not None


def test_defaults_are_the_seglog_prefix_a_ten_second_lease_and_a_five_second_fence():
    settings = config()
    assert (settings.cluster_name, settings.lease_ttl_s) == ("seglog", 10)
    assert settings.keepalive_interval_s == 2.0 and settings.fence_margin_s == 1.0
    assert settings.fence_after_s == 10 - 2 * 2.0 - 1.0


@given(ttl=st.integers(2, 300))
def test_every_accepted_ttl_fences_after_a_renewal_interval_and_before_the_lease_expires(ttl):
    settings = config(lease_ttl_s=ttl)
    assert settings.keepalive_interval_s < settings.fence_after_s < settings.lease_ttl_s


@pytest.mark.parametrize(("overrides", "names"), [
    ({"etcd_endpoints": ()}, "etcd:"),
    ({"etcd_endpoints": ("ftp://h:1",)}, "etcd:"),
    ({"etcd_endpoints": ("http://h:0",)}, "etcd:"),
    ({"etcd_endpoints": ("http://h",)}, "etcd:"),
    ({"cluster_name": "a/b"}, "cluster-name:"),
    ({"cluster_name": ""}, "cluster-name:"),
    ({"instance_id": "x y"}, "instance-id:"),
    ({"advertise": "nohost"}, "advertise:"),
    ({"advertise": "h:70000"}, "advertise:"),
    ({"lease_ttl_s": 1}, "lease-ttl:"),
    ({"lease_ttl_s": 2.5}, "lease-ttl:"),
    ({"lease_ttl_s": 301}, "lease-ttl:"),
    ({"keepalive_interval_s": -1.0}, "keepalive-interval:"),
    ({"keepalive_interval_s": float("nan")}, "keepalive-interval:"),
    ({"fence_margin_s": float("inf")}, "fence-margin:"),
    ({"lease_ttl_s": 3, "keepalive_interval_s": 1.0}, "lease-ttl:"),
])
def test_a_bad_setting_is_one_line_naming_it(overrides, names):
    with pytest.raises(ClusterConfigError) as raised:
        config(**overrides)
    assert str(raised.value).startswith(names) and "\n" not in str(raised.value)


def test_endpoints_accept_https_ipv6_and_a_bare_host_port():
    assert config(etcd_endpoints=("https://[::1]:2379", "10.0.0.1:2379")).etcd_endpoints[1] == "10.0.0.1:2379"


def test_the_instance_id_defaults_to_the_one_recorded_in_the_first_data_dir(tmp_path):
    first = config(instance_id="", data_dirs=(str(tmp_path / "d0"), str(tmp_path / "d1")))
    again = config(instance_id="", data_dirs=(str(tmp_path / "d0"),))
    assert first.instance_id == again.instance_id and first.instance_id.startswith("seglog-")
    assert (tmp_path / "d0" / INSTANCE_ID_FILE_NAME).read_text().strip() == first.instance_id
    assert config(instance_id="", data_dirs=(str(tmp_path / "other"),)).instance_id != first.instance_id


def test_no_instance_id_and_no_data_dir_is_refused():
    with pytest.raises(ClusterConfigError, match="^instance-id: not given"):
        config(instance_id="")


def test_a_damaged_instance_id_file_is_refused_not_replaced(tmp_path):
    (tmp_path / INSTANCE_ID_FILE_NAME).write_text("not/an id\n")
    with pytest.raises(ClusterConfigError, match="^instance-id: .* holds 'not/an id'"):
        instance_id_for(str(tmp_path))
    assert (tmp_path / INSTANCE_ID_FILE_NAME).read_text() == "not/an id\n"


def test_an_instance_id_that_cannot_be_recorded_is_a_one_line_error(tmp_path):
    (tmp_path / (INSTANCE_ID_FILE_NAME + ".tmp")).mkdir()  # the atomic write's temporary is taken
    with pytest.raises(ClusterConfigError, match="^instance-id: cannot record it") as raised:
        instance_id_for(str(tmp_path))
    assert "\n" not in str(raised.value) and not (tmp_path / INSTANCE_ID_FILE_NAME).exists()


def test_an_instance_id_that_cannot_be_read_is_a_one_line_error(tmp_path):
    (tmp_path / "file").write_text("")  # a regular file where the data directory should be
    with pytest.raises(ClusterConfigError, match="^instance-id: cannot read"):
        instance_id_for(str(tmp_path / "file"))


def test_keys_parse_back_what_they_build():
    keys = ClusterKeys("seglog")
    assert keys.parse(keys.instance("i-1")) == ("instance", "i-1", None)
    assert keys.parse(keys.topic("t.x")) == ("topic", "t.x", None)
    assert keys.parse(keys.owner("t.x", 12)) == ("owner", "t.x", 12)
    assert keys.parse("seglog2/owners/t/1") is None and keys.parse("seglog/producer_id_block") is None
    with pytest.raises(MalformedRecordError, match="'seglog/owners/t/x'"):
        keys.parse("seglog/owners/t/x")  # an owner key whose partition is not a number
