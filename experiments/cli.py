"""The command lines' argument parser: a usage mistake is one line on stderr and exit code 2, before any work (no
usage dump, no traceback); ``--help`` prints the usage as argparse does."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

# the files that hold a Hugging Face tokenizer's vocabulary (fast, SentencePiece, byte-level BPE, WordPiece)
TOKENIZER_VOCABULARIES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")


class Parser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are one line (``PROG: error: MESSAGE``) and exit code 2; its
    subcommands' parsers are of this class too."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        # one write, newline included: ranks sharing an unbuffered stderr pipe then keep their lines whole
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.stderr.flush()
        raise SystemExit(2)

    def check_output(self, path: str | Path | None, flag: str = "--out", folder: bool = False) -> None:
        """Before any work, making nothing: ``path`` (a file to write, or with ``folder`` a folder to write into;
        None: none) must be writable, its missing folders made by the writer. One line and exit 2 when a file is
        to be written where a folder is (or the reverse), when a file stands where a folder is to be made, or when
        the nearest existing folder is not writable."""
        if path is None:
            return
        p = Path(path)
        where = p if folder else p.parent
        if not folder and p.is_dir():
            self.error(f"{flag} {p}: is a folder, not a file")
        if folder and p.exists() and not p.is_dir():
            self.error(f"{flag} {p}: is a file, not a folder")
        near = where
        while not os.path.exists(near):  # False also when a file is in the way or a parent is not readable
            near = near.parent
        if not near.is_dir():
            self.error(f"{flag} {p}: cannot make the folder {where}: {near} is a file")
        try:  # a real write: permission bits do not tell root, or a read-only file system, apart
            tempfile.TemporaryFile(dir=near).close()
        except OSError as e:
            self.error(f"{flag} {p}: cannot write in {near} ({e.strerror or type(e).__name__})")

    def check_model(self, path: str | Path, flag: str = "--model", tokenizer: bool = True,
                    weights: bool = True) -> Path:
        """``path`` as a local model folder, before any work: one line and exit 2 unless it is a folder with a
        ``config.json`` holding a JSON object, and (``weights``) weight files inside it
        (:func:`hybridsd.checkpoint_files.weight_files`) and (``tokenizer``) a tokenizer's vocabulary."""
        from hybridsd.checkpoint_files import json_object, weight_files

        p = Path(path)
        if not p.is_dir():
            self.error(f"{flag} {p}: {'is a file, not a' if p.exists() else 'no such'} model folder")
        try:
            json_object(p / "config.json")
            if weights:
                weight_files(p)
        except (OSError, ValueError) as e:
            self.error(f"{flag} {p}: not a model folder ({e})")
        if tokenizer:
            self.check_tokenizer(p, flag)
        return p

    def check_tokenizer(self, path: str | Path, flag: str = "--tokenizer") -> None:
        """One line and exit 2 unless the folder ``path`` holds a tokenizer's vocabulary."""
        if not any((Path(path) / name).is_file() for name in TOKENIZER_VOCABULARIES):
            self.error(f"{flag} {path}: no tokenizer (none of {', '.join(TOKENIZER_VOCABULARIES)})")

    def check_device(self, value: str, flag: str = "--device"):
        """``value`` as a ``torch.device``, before any work: one line and exit 2 when it names none, one other than
        the CPU or CUDA (mps, meta, cpu:1), or a CUDA device this machine does not have."""
        import torch

        try:
            device = torch.device(value)
        except RuntimeError:
            self.error(f"{flag}: not a torch device: {value!r}")
        if device.type not in ("cpu", "cuda") or device.type == "cpu" and device.index:
            self.error(f"{flag} {value}: runs on cuda (cuda:N) or cpu only")
        if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
            self.error(f"{flag} {value}: no such CUDA device here ({torch.cuda.device_count()} visible; {flag} cpu "
                       "runs on the CPU)")
        return device
