"""Stubs generated from proto/seglog/v1 by scripts/gen-proto; never edited by hand."""
