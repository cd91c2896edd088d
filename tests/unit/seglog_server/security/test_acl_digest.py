"""Acl.digest: what instances of a cluster compare to find an ACL file that differs. The same rules
laid out otherwise (rule order, order within a rule, a rule repeated, comments) give one digest;
a rule that grants something new gives another."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.security.acl import parse_acl

_principals = st.sampled_from(["*", "alice", "bob", "carol.x"])
_operations = st.sampled_from(["read", "write", "admin", "describe"])
_topics = st.sampled_from(["*", "events", "audit.*", "metrics", "m*"])
_rule = st.tuples(st.lists(_principals, min_size=1, max_size=3, unique=True),
                  st.lists(_operations, min_size=1, max_size=4, unique=True),
                  st.lists(_topics, min_size=1, max_size=3, unique=True))


def _toml(rules, comment: bool = False) -> str:
    out = []
    for principals, operations, topics in rules:
        out.append(("# a rule\n" if comment else "") + "[[allow]]\n"
                   f"principals = {json.dumps(principals)}\noperations = {json.dumps(operations)}\n"
                   f"topics = {json.dumps(topics)}\n")
    return "\n".join(out)


@settings(max_examples=200, deadline=None)
@given(rules=st.lists(_rule, max_size=5), order=st.randoms(use_true_random=False))
def test_the_same_rules_laid_out_otherwise_have_one_digest(rules, order):
    shuffled = []
    for principals, operations, topics in rules:
        principals, operations, topics = list(principals), list(operations), list(topics)
        for field in (principals, operations, topics):
            order.shuffle(field)
        shuffled.append((principals, operations, topics))
    order.shuffle(shuffled)
    if shuffled:
        shuffled.append(shuffled[0])  # a rule written twice grants nothing more
    assert parse_acl(_toml(shuffled, comment=True)).digest() == parse_acl(_toml(rules)).digest()


@settings(max_examples=200, deadline=None)
@given(rules=st.lists(_rule, max_size=5))
def test_a_rule_granting_more_changes_the_digest(rules):
    added = (["zed"], ["read"], ["only-zed"])  # a principal and topic no generated rule names
    assert parse_acl(_toml([*rules, added])).digest() != parse_acl(_toml(rules)).digest()
