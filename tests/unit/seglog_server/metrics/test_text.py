"""text.py: the fast per-partition text says exactly what prometheus_client's own encoders
say for the same series, in Prometheus's text format and in OpenMetrics, as both parsers read it."""

from __future__ import annotations

import gzip
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from seglog.records import RecordBatchBuilder
from seglog_server.metrics import Metrics
from seglog_server.metrics.text import GaugeBlock, exposition, label_block, make_wsgi_app
from seglog_server.storage import FakeClock, LogManager

OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
TEXT_ACCEPT = "text/plain;version=0.0.4"


class _Registry:
    def __init__(self, *families) -> None:
        self._families = families

    def collect(self):
        return iter(self._families)


def parsed(text: str, openmetrics: bool) -> dict[tuple[str, str, str], list[tuple[str, tuple, float]]]:
    """(family name, type, help) -> sorted (sample name, labels, value as a float; NaN as a string). The
    OpenMetrics parser reads an integer as an int: the block writes integers exactly."""
    parse = parse_openmetrics if openmetrics else parse_text
    out = {}
    for family in parse(text):
        out[family.name, family.type, family.documentation] = sorted(
            (s.name, tuple(sorted(s.labels.items())), "NaN" if math.isnan(s.value) else float(s.value))
            for s in family.samples)
    return out


def block_of(rows: list[tuple[tuple[str, str], int | float]], documentation: str = "Help.") -> GaugeBlock:
    names = ("topic", "partition")
    values = [labels for labels, _ in rows]
    return GaugeBlock("seglog_test_gauge", documentation, names,
                      [label_block(names, labels) for labels in values], values, [v for _, v in rows])


label_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
number = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=200, deadline=None)
@given(rows=st.dictionaries(st.tuples(label_text, label_text), number, max_size=8).map(lambda d: sorted(d.items())),
       documentation=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20))
def test_a_gauge_block_reads_back_as_its_samples_in_both_formats(rows, documentation):
    block = block_of(rows, documentation)
    for openmetrics, encode in ((False, generate_latest), (True, generate_openmetrics)):
        fast = block.text(openmetrics) + ("# EOF\n" if openmetrics else "")
        slow = encode(_Registry(block)).decode()  # prometheus_client's encoder over ``samples``
        assert parsed(fast, openmetrics) == parsed(slow, openmetrics)
    # Integers are written exactly, also past 2**53 where a float would round.
    written = [line.rsplit(" ", 1)[1] for line in block.text(False).split("\n")[2:-1]]
    assert [int(w) for w, (_, v) in zip(written, rows, strict=True) if isinstance(v, int)] == [
        v for _, v in rows if isinstance(v, int)]


def batch(count: int) -> bytes:
    builder = RecordBatchBuilder()
    for number in range(count):
        builder.append(b"v%d" % number)
    return builder.build()


def test_exposition_says_what_the_encoders_say_over_a_real_log_manager(tmp_path):
    manager = LogManager([str(tmp_path / "d")], clock=FakeClock())
    manager.startup()
    try:
        for topic in ("a", 'q"uote', "z"):
            manager.create_topic(topic.replace('"', "-"), 3, {"index.interval.bytes": "1"})
        for number, (topic, partition) in enumerate((("a", 0), ("a", 2), ("z", 1))):
            manager.get_log(topic, partition).append(batch(number + 1))
        metrics = Metrics(partition_series_max=5)
        metrics.manager = manager
        for accept, openmetrics, encode in ((OPENMETRICS_ACCEPT, True, generate_openmetrics),
                                            (TEXT_ACCEPT, False, generate_latest)):
            body, content_type = exposition(metrics.registry, accept)
            assert content_type.startswith("application/openmetrics-text" if openmetrics else "text/plain")
            text = body.decode()
            assert text.count("# EOF") == (1 if openmetrics else 0)
            fast, slow = parsed(text, openmetrics), parsed(encode(metrics.registry).decode(), openmetrics)
            # Every family, every sample: only the residency sample's age moves between the two.
            for families in (fast, slow):
                del families[next(key for key in families if key[0] == "seglog_index_residency_sample_age_seconds")]
            assert fast == slow
            by_name = {key[0]: samples for key, samples in fast.items()}
            ends = {dict(labels)["topic"] + "/" + dict(labels)["partition"]: value
                    for _, labels, value in by_name["seglog_log_end_offset"]}
            assert ends == {"a/0": 1, "a/1": 0, "a/2": 2, "q-uote/0": 0, "q-uote/1": 0}  # cap 5
    finally:
        manager.shutdown()


def test_the_endpoint_filters_by_name_gzips_and_refuses_other_methods(tmp_path):
    manager = LogManager([str(tmp_path / "d")], clock=FakeClock())
    manager.startup()
    try:
        manager.create_topic("t", 2, {})
        manager.get_log("t", 1).append(batch(3))
        metrics = Metrics()
        metrics.manager = manager
        app = make_wsgi_app(metrics.registry)
        answers = []

        def call(method: str, query: str = "", **headers: str) -> bytes:
            environ = {"REQUEST_METHOD": method, "PATH_INFO": "/metrics", "QUERY_STRING": query, **headers}
            return b"".join(app(environ, lambda status, head: answers.append((status, dict(head)))))

        filtered = call("GET", "name[]=seglog_log_end_offset&name[]=seglog_partitions").decode()
        assert {key[0]: samples for key, samples in parsed(filtered, False).items()} == {
            "seglog_log_end_offset": [("seglog_log_end_offset", (("partition", "0"), ("topic", "t")), 0.0),
                                      ("seglog_log_end_offset", (("partition", "1"), ("topic", "t")), 3.0)],
            "seglog_partitions": [("seglog_partitions", (), 2.0)]}
        zipped = call("GET", HTTP_ACCEPT=OPENMETRICS_ACCEPT, HTTP_ACCEPT_ENCODING="gzip")
        assert answers[-1][1]["Content-Encoding"] == "gzip"
        assert gzip.decompress(zipped).endswith(b"# EOF\n")
        call("POST")
        assert answers[-1][0].startswith("405")
    finally:
        manager.shutdown()
