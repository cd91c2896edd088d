"""Where the cleaner's Spark driver listens and what address it advertises to executors."""

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from seglog_spark.session import EVERY_INTERFACE, LOOPBACK, DriverAddress, driver_address, is_local_master

names = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True).filter(lambda name: name != "localhost")
loopbacks = st.sampled_from(["127.0.0.1", "127.3.2.1", "localhost", "[::1]"])
settings = st.fixed_dictionaries({}, optional={
    "SPARK_DRIVER_HOST": names, "SPARK_LOCAL_HOSTNAME": names,
    "SPARK_LOCAL_IP": st.sampled_from(["127.0.0.1", "10.0.0.5", ""])})


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def test_a_local_master_binds_and_advertises_loopback():
    assert driver_address("local[2]", {}) == DriverAddress(LOOPBACK, LOOPBACK)
    assert driver_address("spark://127.0.0.1:7077", {}) == DriverAddress(LOOPBACK, LOOPBACK)
    assert driver_address("local[*]", {"SPARK_LOCAL_IP": "10.0.0.5"}) == DriverAddress("10.0.0.5", "10.0.0.5")


def test_compose_s_cleaner_advertises_its_service_name_and_listens_everywhere():
    # docker-compose.yml gives the cleaner SPARK_LOCAL_HOSTNAME=cleaner and a spark://spark-master master.
    address = driver_address("spark://spark-master:7077", {"SPARK_LOCAL_HOSTNAME": "cleaner"})
    assert address == DriverAddress(EVERY_INTERFACE, "cleaner")


def test_spark_driver_host_wins_over_the_local_hostname():
    environ = {"SPARK_DRIVER_HOST": "10.1.2.3", "SPARK_LOCAL_HOSTNAME": "cleaner"}
    assert driver_address("spark://master:7077", environ).host == "10.1.2.3"


@given(master_host=names, environ=settings)
def test_a_cluster_master_never_gets_a_loopback_driver_address(master_host, environ):
    address = driver_address(f"spark://{master_host}:7077", environ)
    assert address.bind == EVERY_INTERFACE
    assert address.host and not is_loopback(address.host)


@given(host=loopbacks, port=st.integers(1, 65535))
def test_a_master_on_loopback_is_local(host, port):
    assert is_local_master(f"spark://{host}:{port}")
