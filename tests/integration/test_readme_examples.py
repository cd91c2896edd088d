"""The README's quickstart and its grpcurl requests, run in order against a real service: each
`seglog` line of the quickstart through the real CLI, then each grpcurl request's JSON body through
the service's own message types (grpcurl is not installed here; the body and the method are what
it would send). A request that fails after the quickstart (a Fetch below the log start the
quickstart's delete-records moved) fails here."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
from google.protobuf import json_format

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
GRPCURL = re.compile(r"grpcurl -plaintext(?: -emit-defaults)? -d '(?P<body>[^']+)' \\\n\s+\S+ seglog\.v1\.LogService/(?P<method>\w+)")


def _quickstart_lines() -> list[str]:
    """The quickstart's shell lines, except ``seglog dump`` (it reads ./data, the service's
    default directory, which this test's service does not use)."""
    text = README.read_text()
    block = text.split("## Quickstart", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [line for line in block.strip().splitlines() if line.strip() and "seglog dump" not in line]


def test_the_quickstart_then_the_grpcurl_requests_work_in_order(start_service):
    service = start_service()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("SEGLOG_")}
    environment["SEGLOG_SERVER"] = service.address  # what --server would say, for every line
    environment["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    lines = _quickstart_lines()
    assert any("delete-records" in line for line in lines)
    for line in lines:
        done = subprocess.run(["bash", "-c", f"set -o pipefail; {line}"], capture_output=True, text=True,
                              timeout=60, env=environment)
        assert done.returncode == 0, (line, done.stderr)
    requests = list(GRPCURL.finditer(README.read_text()))
    assert [match["method"] for match in requests] == ["Produce", "Fetch", "OffsetsForTimes"]
    for match in requests:
        method = match["method"]
        request = json_format.Parse(match["body"], getattr(pb, f"{method}Request")())
        answer = getattr(service.stub, method)(request, timeout=10)
        if method == "Fetch":
            assert [record.offset for record in answer.decoded_records][:1] == [request.offset]
        if method == "OffsetsForTimes":
            (result,) = answer.results
            assert not result.HasField("error") and result.offset >= 1
