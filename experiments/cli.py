"""The command lines' argument parser: a usage mistake is one line on stderr and exit code 2, before any work (no
usage dump, no traceback); ``--help`` prints the usage as argparse does."""

from __future__ import annotations

import argparse
import sys


class Parser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are one line (``PROG: error: MESSAGE``) and exit code 2; its
    subcommands' parsers are of this class too."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)
