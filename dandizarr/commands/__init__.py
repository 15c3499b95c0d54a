"""Subcommands of the ``dandizarr`` CLI."""
