"""The storage engine's base: the `fs` and clock seams, the errors, the I/O error rules, the observer,
the log config, file names and partition names. Imports nothing else of the storage."""
