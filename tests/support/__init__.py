"""Helpers the tests share: servers they start (SeaweedFS), and fixtures' building blocks."""
