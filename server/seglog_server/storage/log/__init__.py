"""One partition's log: ``Log`` (append, read, roll, lookups, retention, truncation, the swap), its
loader, the batch validator, the results it answers with. Imports ``producers`` and below; never
``dirs``, which sits beside it."""
