"""Idempotent producers: the per-partition producer state, its snapshots and its rebuild from the
segments, and the service's producer-id blocks. Imports ``segment`` and below."""
