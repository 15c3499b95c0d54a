"""Sharding: many chunks in one stored object. Pure library (numpy and codecs, no Django)."""
