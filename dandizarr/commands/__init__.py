"""Subcommands of the ``dandizarr`` CLI: one module each, exposing ``register(subparsers)``.

``errors`` holds ``CommandError``; ``connection`` the options and helpers shared by the
commands that talk to a service (upload, download, ls).
"""

import argparse
from typing import TypeAlias

# What ``register`` is given: ``ArgumentParser.add_subparsers()``'s result.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
