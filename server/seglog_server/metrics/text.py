"""Writing /metrics: prometheus_client's encoders, and a fast path for families of many series.

prometheus_client builds a ``Sample`` per series and its encoders format each through a handful
of calls (label-name validation, escaping, float formatting): about 10 us a series here, so the
50,000 per-partition series of 10,000 partitions took half a second per scrape. A ``GaugeBlock``
is a gauge family that writes its own lines: its label blocks are built once per scrape (and
shared by the families of the same partitions), its values formatted with ``str`` for integers.
It still is a ``Metric``: ``samples`` builds the ``Sample`` list on demand, so any other reader
(``generate_latest``, ``restricted_registry``, a test) sees the same series the fast path writes.

``exposition`` writes one scrape: the ordinary families through the encoder prometheus_client
picks for the ``Accept`` header (Prometheus's text format 0.0.4 or 1.0.0, or OpenMetrics), then
each block in the same format, then OpenMetrics' ``# EOF``. For gauges the two formats share
their line syntax; they differ in escaping ``"`` in HELP and in the closing ``# EOF``.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qs

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

__all__ = ["GZIP_LEVEL", "GaugeBlock", "exposition", "label_block", "make_wsgi_app"]

_OPENMETRICS_EOF = b"# EOF\n"
# Prometheus asks for gzip. prometheus_client compresses at level 9: 210 ms for the 3 MB of a
# 10,000-partition scrape here, more than everything else the scrape does. Level 1 takes 6 ms
# and the body is 17 % larger (163 KB against 140 KB): exposition text is repetitive enough
# that the fastest level already shrinks it twentyfold.
GZIP_LEVEL = 1


def _escape_label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def label_block(names: Sequence[str], values: Sequence[str]) -> str:
    """``{name="value",...}`` with the values escaped as both formats require."""
    return "{" + ",".join(f'{n}="{_escape_label_value(v)}"' for n, v in zip(names, values, strict=True)) + "}"


class GaugeBlock(Metric):
    """A gauge family of many labelled series, written straight to exposition text.

    ``label_blocks[i]`` (from ``label_block``) and ``label_values[i]`` describe series ``i``;
    both lists may be shared with other blocks over the same series. ``values`` are ints (written
    with ``str``, exact beyond 2**53) or floats (written as prometheus_client writes them)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        label_names: Sequence[str],
        label_blocks: Sequence[str],
        label_values: Sequence[Sequence[str]],
        values: Sequence[int] | Sequence[float],
    ) -> None:
        # Not Metric.__init__: it would assign the list ``samples`` is computed from.
        assert len(label_blocks) == len(label_values) == len(values)
        self.name = name
        self.documentation = documentation
        self.unit = ""
        self.type = "gauge"
        self.label_names = tuple(label_names)
        self._label_blocks = label_blocks
        self._label_values = label_values
        self._values = values

    @property
    def samples(self) -> list[Sample]:  # type: ignore[override]
        names = self.label_names
        return [
            Sample(self.name, dict(zip(names, labels, strict=True)), float(value))
            for labels, value in zip(self._label_values, self._values, strict=True)
        ]

    @samples.setter
    def samples(self, _: Any) -> None:
        raise AttributeError("a GaugeBlock's samples come from its rows")

    def text(self, openmetrics: bool) -> str:
        help_text = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        if openmetrics:
            help_text = help_text.replace('"', r"\"")
        name = self.name
        head = f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"
        values = self._values
        if all(type(value) is int for value in values):
            lines = [f"{name}{labels} {value}\n" for labels, value in zip(self._label_blocks, values)]
        else:
            lines = [f"{name}{labels} {_number(value)}\n" for labels, value in zip(self._label_blocks, values)]
        return head + "".join(lines)


def _number(value: float) -> str:
    return str(value) if type(value) is int else floatToGoString(value)


class _Families:
    """A collector over families already collected (what the encoders iterate)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def exposition(
    registry: CollectorRegistry, accept_header: str | None, names: Iterable[str] | None = None
) -> tuple[bytes, str]:
    """One scrape of ``registry`` in the format ``accept_header`` asks for: (body, content type).
    With ``names`` (the ``name[]`` query parameter), only samples of those names."""
    encoder, content_type = choose_encoder(accept_header or "")
    openmetrics = content_type.startswith("application/openmetrics-text")
    wanted = None if names is None else set(names)
    ordinary: list[Metric] = []
    blocks: list[GaugeBlock] = []
    for family in registry.collect():
        if isinstance(family, GaugeBlock):
            if wanted is None or family.name in wanted:  # a gauge's samples carry its name
                blocks.append(family)
        elif wanted is None:
            ordinary.append(family)
        else:
            kept = [sample for sample in family.samples if sample.name in wanted]
            if kept:
                ordinary.append(_with_samples(family, kept))
    head = encoder(_Families(ordinary))
    if openmetrics:
        assert head.endswith(_OPENMETRICS_EOF), head[-40:]
        head = head[: -len(_OPENMETRICS_EOF)]
    parts = [head, *(block.text(openmetrics).encode() for block in blocks)]
    if openmetrics:
        parts.append(_OPENMETRICS_EOF)
    return b"".join(parts), content_type


def _with_samples(family: Metric, samples: list[Sample]) -> Metric:
    copy = Metric(family.name, family.documentation, family.type, family.unit)
    copy.samples = samples
    return copy


def make_wsgi_app(registry: CollectorRegistry) -> Callable[..., list[bytes]]:
    """prometheus_client's WSGI app (GET, OPTIONS, the ``name[]`` filter, gzip) on
    ``exposition``. (prometheus_client's own filter finds nothing here: it looks collectors up by
    the names they describe, and the seglog collector describes none.)"""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ["REQUEST_METHOD"]
        if method == "OPTIONS":
            start_response("200 OK", [("Allow", "OPTIONS,GET")])
            return [b""]
        if method != "GET":
            start_response("405 Method Not Allowed", [("Allow", "OPTIONS,GET")])
            return [f"# HTTP 405 Method Not Allowed: {method}; use OPTIONS or GET\n".encode()]
        if environ.get("PATH_INFO") == "/favicon.ico":
            start_response("200 OK", [])
            return [b""]
        params = parse_qs(environ.get("QUERY_STRING", ""))
        output, content_type = exposition(registry, environ.get("HTTP_ACCEPT"), params.get("name[]"))
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING") or ""):
            output = gzip.compress(output, compresslevel=GZIP_LEVEL)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [output]

    return app
