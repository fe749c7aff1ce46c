"""Consistent renaming of a Python file's own names, so that edit tuning shows files the target cannot recall.

A target pretrained on a repository's files can continue their lines from memory; on a repository it never saw it
must copy them from its input instead. :func:`renamed` gives an edit's texts (``before``, ``after``, the subject)
new names for some of the names the file defines (functions, classes, arguments, assigned variables and
attributes): one mapping for all texts, applied to every whole-word occurrence (code, strings and comments alike),
so the edit stays the same edit. The new names are made of the file's own name parts and of random syllables, in
the old name's case style. Pure Python (``ast``, ``re``), deterministic given the ``random.Random``.

    >>> import random
    >>> src = "def parse(url):\\n    return url.split(':')\\n"
    >>> print(renamed((src, "Split the url."), random.Random(2), share=1.0))
    ("def silzen_parse(rangor_marfi):\\n    return rangor_marfi.split(':')\\n", 'Split the rangor_marfi.')
"""

from __future__ import annotations

import ast
import builtins
import keyword
import random
import re
import warnings

SYLLABLES = ("ka", "lo", "mi", "ten", "rus", "pa", "vel", "dor", "qui", "zen", "ba", "fi", "gor", "hal", "ix",
             "jun", "mar", "nod", "ost", "pel", "ran", "sil", "tov", "ur", "wen", "yar")
RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins)) | {"self", "cls"}
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def defined_names(text: str) -> list[str]:
    """The names ``text`` defines, in order of first definition: function, class and argument names, assigned
    and imported-as names, and attributes assigned on ``self``; without keywords, builtins, ``self``/``cls``,
    dunder names and names under 3 characters. Empty when ``text`` does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the code's own invalid escapes
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = None
        elif isinstance(node, ast.arg):
            found[node.arg] = None
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found[node.id] = None
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            found[node.attr] = None
        elif isinstance(node, ast.alias) and node.asname:
            found[node.asname] = None
    return [n for n in found if len(n) >= 3 and n not in RESERVED and not (n.startswith("__") and n.endswith("__"))]


def _style(name: str, parts: list[str]) -> str:
    """``parts`` (lower case) joined in ``name``'s case style: CamelCase, UPPER_CASE or snake_case, with its
    leading underscores."""
    lead = name[: len(name) - len(name.lstrip("_"))]
    core = name.lstrip("_")
    if core[:1].isupper() and not core.isupper():
        return lead + "".join(p.capitalize() for p in parts)
    if core.isupper():
        return lead + "_".join(p.upper() for p in parts)
    return lead + "_".join(parts)


def new_name(old: str, pool: list[str], rng: random.Random) -> str:
    """A name in ``old``'s style of 1-3 distinct parts, each a part of ``pool`` (half the time, when there is one)
    or two random syllables."""
    parts = [rng.choice(pool) if pool and rng.random() < 0.5 else rng.choice(SYLLABLES) + rng.choice(SYLLABLES)
             for _ in range(rng.choice((1, 2, 2, 3)))]
    return _style(old, list(dict.fromkeys(parts)))


def renaming(text: str, rng: random.Random, share: float) -> dict[str, str]:
    """Old name -> new name for each of ``text``'s :func:`defined_names` picked with probability ``share``; the
    new names are distinct and occur nowhere in ``text`` as words."""
    names = defined_names(text)
    words = set(re.findall(r"\w+", text))
    pool = sorted({p.lower() for n in names for p in _PARTS.findall(n) if len(p) >= 3})
    mapping: dict[str, str] = {}
    taken = words | RESERVED
    for old in names:
        if rng.random() >= share:
            continue
        for _ in range(20):
            new = new_name(old, pool, rng)
            if new not in taken and new.isidentifier():
                mapping[old] = new
                taken.add(new)
                break
    return mapping


def apply_renaming(text: str, mapping: dict[str, str]) -> str:
    """``text`` with every whole-word occurrence of a key of ``mapping`` replaced by its value, in one pass."""
    if not mapping:
        return text
    pattern = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, sorted(mapping, key=len, reverse=True)))
                         + r")(?![\w])")
    return pattern.sub(lambda m: mapping[m.group(1)], text)


def renamed(texts: tuple[str, ...], rng: random.Random, share: float) -> tuple[str, ...]:
    """``texts`` with the names of the first one (the file) renamed by one :func:`renaming` (see the module
    docstring); ``share`` is each defined name's probability of a new name."""
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    mapping = renaming(texts[0], rng, share)
    return tuple(apply_renaming(t, mapping) for t in texts)
