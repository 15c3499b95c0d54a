"""Reads: rows by identifier, an archive's contents (tree plus pending batches), shard members."""
