"""Who may do what on which topics (``--acl FILE``): allow rules only, deny by default.

Without ``--acl`` every principal may do everything (the loopback quickstart). Once a file is
given, a call is allowed only if a rule allows it. The file is TOML::

    # Each [[allow]] table grants operations on topics to principals.
    [[allow]]
    principals = ["alice", "bob"]       # names from the token file or client certificates;
                                        # "*" is everyone, ANONYMOUS included
    operations = ["read", "describe"]   # read, write, admin, describe
    topics = ["events", "metrics.*"]    # exact names; a trailing "*" is a prefix; "*" is all

Operations (``operations.py`` maps every RPC to one):

    read      Fetch, Consume
    write     Produce; InitProducerId needs write on at least one topic (Kafka's KIP-679)
    admin     CreateTopic, DeleteTopic, AlterTopicConfigs, DeleteRecords, snapshots and cleaning commits
    describe  DescribeTopic, OffsetsForTimes, and which topics ListTopics shows

read, write and admin on a topic imply describe of it (as Kafka's READ/WRITE/ALTER imply
DESCRIBE). Calls that name no topic (cleaning calls by snapshot id, ListCleanable) need the
operation on ``"*"``: a rule for every topic.
"""

from __future__ import annotations

import enum
import hashlib
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import SecurityFileError
from .token_file import PRINCIPAL_NAME

__all__ = ["ANONYMOUS", "ANY_PRINCIPAL", "Acl", "AclRule", "Operation", "parse_acl"]

# The principal of a caller that presented no credentials, where none are required (Kafka's name).
ANONYMOUS = "ANONYMOUS"
ANY_PRINCIPAL = "*"
ALL_TOPICS = "*"
# Bounds on what a file may hold, so a mistaken file cannot make every check slow.
_RULES_MAX = 10_000
_ENTRIES_PER_RULE_MAX = 1_000


class Operation(enum.Enum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    DESCRIBE = "describe"


# What each granted operation allows besides itself.
_IMPLIES: Mapping[Operation, frozenset[Operation]] = {
    Operation.READ: frozenset({Operation.READ, Operation.DESCRIBE}),
    Operation.WRITE: frozenset({Operation.WRITE, Operation.DESCRIBE}),
    Operation.ADMIN: frozenset({Operation.ADMIN, Operation.DESCRIBE}),
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE}),
}


@dataclass(frozen=True)
class AclRule:
    principals: frozenset[str]
    operations: frozenset[Operation]  # as granted, implications expanded
    topics: frozenset[str]  # exact names
    prefixes: tuple[str, ...]  # "" (from "*") matches every topic

    def matches_principal(self, principal: str) -> bool:
        return ANY_PRINCIPAL in self.principals or principal in self.principals

    def matches_topic(self, topic: str | None) -> bool:
        if topic is None:  # a cluster-wide call: only a rule for every topic covers it
            return "" in self.prefixes
        return topic in self.topics or any(topic.startswith(prefix) for prefix in self.prefixes)


class Acl:
    def __init__(self, rules: Iterable[AclRule]) -> None:
        self._rules = tuple(rules)

    @property
    def rule_count(self) -> int:
        return len(self._rules)

    def digest(self) -> str:
        """SHA-256 (hex) of what the rules grant, independent of the file's layout: the rules'
        order, the order within a rule, comments and spacing do not change it, and operations are
        compared as granted (implications expanded). Instances of a cluster keep one ACL file
        each; the digest is how they find one that differs (docs/cluster.md)."""
        canonical = sorted(json.dumps([sorted(rule.principals), sorted(op.value for op in rule.operations),
                                       sorted(rule.topics), sorted(rule.prefixes)]) for rule in self._rules)
        return hashlib.sha256("\n".join(sorted(set(canonical))).encode()).hexdigest()

    def allows(self, principal: str, operation: Operation, topic: str | None) -> bool:
        return any(
            operation in rule.operations and rule.matches_principal(principal)
            and rule.matches_topic(topic)
            for rule in self._rules
        )

    def allows_on_some_topic(self, principal: str, operation: Operation) -> bool:
        """Whether some rule grants ``operation`` on at least one topic (InitProducerId)."""
        return any(
            operation in rule.operations and rule.matches_principal(principal)
            and bool(rule.topics or rule.prefixes)
            for rule in self._rules
        )


def parse_acl(text: str) -> Acl:
    """An Acl from the file's text; SecurityFileError names the rule and what is wrong."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SecurityFileError(f"ACL file is not valid TOML: {exc}") from None
    unknown = set(document) - {"allow"}
    if unknown:
        raise SecurityFileError(f"ACL file: unknown table(s) {sorted(unknown)}; only [[allow]]")
    tables = document.get("allow", [])
    if not isinstance(tables, list) or len(tables) > _RULES_MAX:
        raise SecurityFileError(f"ACL file: allow must be up to {_RULES_MAX} [[allow]] tables")
    return Acl(_rule(number, table) for number, table in enumerate(tables, start=1))


def _rule(number: int, table: Any) -> AclRule:
    where = f"ACL rule {number}"
    if not isinstance(table, dict) or set(table) != {"principals", "operations", "topics"}:
        raise SecurityFileError(f"{where}: needs exactly principals, operations and topics")
    principals = _strings(where, "principals", table["principals"])
    for name in principals:
        if name != ANY_PRINCIPAL and not PRINCIPAL_NAME.fullmatch(name):
            raise SecurityFileError(f"{where}: bad principal name {name!r}")
    operations: set[Operation] = set()
    for name in _strings(where, "operations", table["operations"]):
        try:
            operations |= _IMPLIES[Operation(name)]
        except ValueError:
            raise SecurityFileError(
                f"{where}: unknown operation {name!r} (read, write, admin, describe)"
            ) from None
    exact, prefixes = set(), []
    for pattern in _strings(where, "topics", table["topics"]):
        if pattern.endswith("*"):
            if "*" in pattern[:-1]:
                raise SecurityFileError(f"{where}: '*' only at the end of a topic pattern")
            prefixes.append(pattern[:-1])
        elif "*" in pattern:
            raise SecurityFileError(f"{where}: '*' only at the end of a topic pattern")
        else:
            exact.add(pattern)
    return AclRule(frozenset(principals), frozenset(operations), frozenset(exact), tuple(prefixes))


def _strings(where: str, key: str, value: Any) -> list[str]:
    if (not isinstance(value, list) or not value or len(value) > _ENTRIES_PER_RULE_MAX
            or not all(isinstance(item, str) and item for item in value)):
        raise SecurityFileError(f"{where}: {key} must be a list of 1 to {_ENTRIES_PER_RULE_MAX} "
                                "non-empty strings")
    return value
