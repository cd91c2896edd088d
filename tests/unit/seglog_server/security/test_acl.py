import pytest

from seglog_server.security import ANONYMOUS, Operation, SecurityFileError, parse_acl

ACL = """
[[allow]]
principals = ["alice"]
operations = ["write"]
topics = ["orders", "logs.*"]

[[allow]]
principals = ["*"]
operations = ["describe"]
topics = ["public"]

[[allow]]
principals = ["ops"]
operations = ["admin"]
topics = ["*"]
"""


@pytest.fixture
def acl():
    return parse_acl(ACL)


@pytest.mark.parametrize(
    ("principal", "operation", "topic", "allowed"),
    [
        ("alice", Operation.WRITE, "orders", True),
        ("alice", Operation.WRITE, "logs.app", True),  # prefix
        ("alice", Operation.WRITE, "logs", False),  # the prefix is "logs."
        ("alice", Operation.DESCRIBE, "orders", True),  # write implies describe
        ("alice", Operation.READ, "orders", False),  # but not read
        ("alice", Operation.WRITE, "order", False),
        ("bob", Operation.WRITE, "orders", False),  # deny by default
        ("bob", Operation.DESCRIBE, "public", True),  # "*" is every principal
        (ANONYMOUS, Operation.DESCRIBE, "public", True),
        (ANONYMOUS, Operation.READ, "public", False),
        ("ops", Operation.ADMIN, "anything", True),
        ("ops", Operation.ADMIN, None, True),  # a cluster-wide call needs a rule for "*"
        ("alice", Operation.WRITE, None, False),
        ("ops", Operation.READ, "anything", False),  # admin does not imply read
    ],
)
def test_rules(acl, principal, operation, topic, allowed):
    assert acl.allows(principal, operation, topic) is allowed


@pytest.mark.parametrize(
    ("principal", "operation", "allowed"),
    [
        ("alice", Operation.WRITE, True),  # write on orders: may get a producer id
        ("bob", Operation.WRITE, False),
        ("ops", Operation.WRITE, False),  # admin is not write
        (ANONYMOUS, Operation.DESCRIBE, True),
    ],
)
def test_an_operation_on_some_topic(acl, principal, operation, allowed):
    assert acl.allows_on_some_topic(principal, operation) is allowed


def test_an_empty_file_denies_everything():
    assert not parse_acl("").allows("root", Operation.DESCRIBE, "x")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[[allow]]\nprincipals = ['a']\noperations = ['read']\n", "exactly"),
        ("[[allow]]\nprincipals = ['a']\noperations = ['delete']\ntopics = ['x']\n", "unknown operation"),
        ("[[allow]]\nprincipals = []\noperations = ['read']\ntopics = ['x']\n", "principals must be"),
        ("[[allow]]\nprincipals = ['a']\noperations = ['read']\ntopics = ['a*b']\n", "only at the end"),
        ("[[allow]]\nprincipals = ['a b']\noperations = ['read']\ntopics = ['x']\n", "bad principal"),
        ("[deny]\n", "unknown table"),
        ("not toml ===", "not valid TOML"),
    ],
)
def test_malformed_files_are_refused_with_the_reason(text, reason):
    with pytest.raises(SecurityFileError, match=reason):
        parse_acl(text)
