"""The stubs in client/seglog/v1 are exactly what scripts/gen-proto makes from proto/seglog/v1."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"
STUB_DIR = ROOT / "client" / "seglog" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def _generate(out_dir: pathlib.Path) -> None:
    protos = sorted(str(p.relative_to(ROOT)) for p in (PROTO_DIR / "seglog" / "v1").glob("*.proto"))
    assert protos, "no .proto files under proto/seglog/v1"
    # scripts/gen-proto's command line (run from the repository root), into our own directory.
    command = [
        sys.executable, "-m", "grpc_tools.protoc", "-Iproto", f"--python_out={out_dir}",
        f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *protos,
    ]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, f"protoc failed: {completed.stderr}"


def _stub_files(directory: pathlib.Path) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.name.endswith(GENERATED_SUFFIXES)
    }


def test_regenerated_stubs_are_byte_identical_to_the_committed_ones(tmp_path):
    _generate(tmp_path)
    fresh = _stub_files(tmp_path / "seglog" / "v1")
    committed = _stub_files(STUB_DIR)
    assert fresh, "protoc generated nothing"
    assert sorted(fresh) == sorted(committed), "stub files differ: run scripts/gen-proto"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run scripts/gen-proto and commit the result"


def test_every_proto_has_its_three_stub_files():
    for proto in (PROTO_DIR / "seglog" / "v1").glob("*.proto"):
        for suffix in GENERATED_SUFFIXES:
            assert (STUB_DIR / f"{proto.stem}{suffix}").is_file(), f"{proto.stem}{suffix} missing"
