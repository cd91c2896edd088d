"""The storage port (rpc/storage_port.py): the real LogManager and Log satisfy it member by member
(a property is a property, a method takes the parameters the port names, in order and of the same
kind, and any extra parameter has a default), and rpc/ imports from the storage only its public
surface and its error modules."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any, Protocol

import seglog_server.rpc as rpc_package
from seglog_server.rpc.storage_port import InlineLock, PartitionLog, StoragePort
from seglog_server.storage import Log, LogManager

# What rpc/ may import from the storage: its declared surface and the errors status.py translates.
ALLOWED_STORAGE_MODULES = {
    "seglog_server.storage",
    "seglog_server.storage.base.errors",
    "seglog_server.storage.base.io_errors",
}


def protocol_members(protocol: type) -> dict[str, Any]:
    return {
        name: value for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def mismatches(protocol: type, implementation: type) -> list[str]:
    """Every way ``implementation`` fails ``protocol`` structurally (empty: it satisfies it)."""
    found = []
    for name, declared in protocol_members(protocol).items():
        real = inspect.getattr_static(implementation, name, None)
        if real is None:
            found.append(f"{name}: missing")
        elif isinstance(declared, property):
            if not isinstance(real, property):
                found.append(f"{name}: a property in the port, {type(real).__name__} in storage")
        elif not callable(real) or isinstance(real, property):
            found.append(f"{name}: a method in the port, {type(real).__name__} in storage")
        else:
            problem = _signature_mismatch(inspect.signature(declared), inspect.signature(real))
            if problem:
                found.append(f"{name}: {problem}")
    return found


def _signature_mismatch(declared: inspect.Signature, real: inspect.Signature) -> str | None:
    wanted = list(declared.parameters.values())
    offered = list(real.parameters.values())
    if len(offered) < len(wanted):
        return f"takes {real}, the port calls it as {declared}"
    for want, offer in zip(wanted, offered):
        if (want.name, want.kind) != (offer.name, offer.kind):
            return f"parameter {offer.name} ({offer.kind.name}) where the port has {want.name} ({want.kind.name})"
        if want.default is not inspect.Parameter.empty and offer.default is inspect.Parameter.empty:
            return f"parameter {offer.name} has no default; the port may leave it out"
    extra = [p.name for p in offered[len(wanted):] if p.default is inspect.Parameter.empty
             and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if extra:
        return f"extra parameters without defaults: {extra}"
    return None


def test_the_log_manager_satisfies_the_storage_port():
    assert mismatches(StoragePort, LogManager) == []


def test_the_log_satisfies_the_partition_log_port():
    assert mismatches(PartitionLog, Log) == []


def test_the_inline_lock_the_manager_hands_out_satisfies_its_port(tmp_path):
    manager = LogManager([str(tmp_path / "d")])
    manager.startup()
    try:
        manager.create_topic("t", 1)
        lock = manager.inline_lock(manager.get_log("t", 0))
        assert all(callable(getattr(lock, name, None)) for name in protocol_members(InlineLock))
        assert lock.acquire(blocking=False)
        lock.release()
    finally:
        manager.shutdown()


def test_the_structural_check_names_every_kind_of_mismatch():
    """The check above is not vacuous: a missing member, a method for a property, a renamed or
    reordered parameter, a missing default and an extra required parameter are each reported."""

    class Port(Protocol):
        @property
        def size(self) -> int: ...

        def read(self, offset: int, max_bytes: int, *, strict: bool = True) -> bytes: ...

        def gone(self) -> None: ...

    class Wrong:
        def size(self) -> int:
            return 0

        def read(self, offset: int, bytes_max: int, *, strict: bool, more: int) -> bytes:
            return b""

    found = mismatches(Port, Wrong)
    assert [line.split(":")[0] for line in found] == ["size", "read", "gone"]
    assert "bytes_max" in found[1]

    class Right:
        size = property(lambda self: 0)

        def read(self, offset: int, max_bytes: int, *, strict: bool = False, more: int = 1) -> bytes:
            return b""

        def gone(self) -> None:
            return None

    assert mismatches(Port, Right) == []


def storage_imports(path: Path) -> set[str]:
    """Modules of ``seglog_server.storage`` that ``path`` imports (type-checking imports too)."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            if node.module.startswith("seglog_server.storage"):
                # ``from seglog_server.storage.base import errors`` imports the module ``errors``
                found.add(next((n for n in names[1:] if n in ALLOWED_STORAGE_MODULES), node.module))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("seglog_server.storage"))
        elif isinstance(node, ast.ImportFrom) and node.level >= 2:
            found.add(f"relative import above rpc/: {node.module}")
    return found


def test_rpc_imports_only_the_storage_public_surface_and_its_errors():
    rpc_dir = Path(rpc_package.__file__).parent
    files = sorted(rpc_dir.glob("**/*.py"))
    assert len(files) > 10
    offending = {
        str(path.relative_to(rpc_dir)): sorted(imports - ALLOWED_STORAGE_MODULES)
        for path in files
        if (imports := storage_imports(path)) - ALLOWED_STORAGE_MODULES
    }
    assert offending == {}


def test_the_import_check_sees_a_reach_into_storage_internals(tmp_path):
    module = tmp_path / "reach.py"
    module.write_text(
        "from seglog_server.storage.base.log_config import LONG_MAX\n"
        "from seglog_server.storage.base import errors\n"
        "import seglog_server.storage.log.unified_log\n"
        "from ..storage import Log\n"
    )
    assert storage_imports(module) - ALLOWED_STORAGE_MODULES == {
        "seglog_server.storage.base.log_config",
        "seglog_server.storage.log.unified_log",
        "relative import above rpc/: storage",
    }
