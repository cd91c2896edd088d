"""One SparkSession for the whole test run (a session costs 5-7 s to start here)."""

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from seglog_spark.session import build_session

    session = build_session("local[2]", app_name="seglog-spark-tests", tmp_dir=str(tmp_path_factory.mktemp("spark")))
    yield session
    session.stop()
