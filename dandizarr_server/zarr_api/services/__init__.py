"""Writes: every change to dandisets, archives, batches and shards goes through these modules."""
