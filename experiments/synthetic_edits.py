"""Synthetic edits of Python files for the zoo's edit tuning, kept when their character edit norm is in (0, 0.6]:

- seeded transforms (rename, delete, document, change a constant, reorder imports, rewrite a body or insert a
  definition taken from a second file, ...) applied one to four at a time, each with its own instruction, kept
  when the file still parses;
- span edits (:func:`span_edit`): one to five places drawn anywhere in the file, each replacing, removing or
  adding lines, the new lines a run of a second file's lines. Nothing in the file marks these places, so only
  the located request tells a model where to leave the copy, for how many lines, and where to resume; their
  sizes are drawn so that the edit norms spread over (0, 0.6] as the real edits' do."""

from __future__ import annotations

import ast
import math
import random
import re

from experiments.edit_corpus import change_request
from hybridsd.edit_distance import edit_norm

WORDS = ("value", "item", "data", "result", "count", "name", "index", "config", "info", "key", "total", "state",
         "options", "entry", "source", "target", "buffer", "node", "size", "flag")
MODULES = ("os", "sys", "re", "json", "math", "time", "logging", "itertools", "functools", "collections",
           "pathlib", "typing", "warnings", "dataclasses", "contextlib", "copy", "random", "string")
NEW_FUNCTIONS = (
    ("clamp", "a function `clamp(value, low, high)` that limits value to the range [low, high]",
     ('def clamp(value, low, high):\n    """Limit value to the range [low, high]."""\n'
     '    return max(low, min(value, high))\n')),
    ("is_empty", "a helper `is_empty(value)` that returns True for None and empty containers",
     ('def is_empty(value):\n    """Return True if value is None or empty."""\n'
     '    return value is None or len(value) == 0\n')),
    ("chunked", "a function `chunked(items, size)` that splits a list into chunks of the given size",
     ('def chunked(items, size):\n    """Split items into lists of at most size elements."""\n'
     '    return [items[i:i + size] for i in range(0, len(items), size)]\n')),
    ("flatten", "a function `flatten(nested)` that flattens a list of lists",
     'def flatten(nested):\n    """Flatten one level of nesting."""\n    return [x for sub in nested for x in sub]\n'),
    ("first", "a function `first(items, default=None)` returning the first element or a default",
     ('def first(items, default=None):\n    """Return the first element of items, or default if empty."""\n'
     '    for item in items:\n        return item\n    return default\n')),
    ("unique", "a function `unique(items)` that removes duplicates while keeping the order",
     ('def unique(items):\n    """Return the items without duplicates, in their first order."""\n'
     '    seen = set()\n    result = []\n    for item in items:\n        if item not in seen:\n'
     '            seen.add(item)\n            result.append(item)\n    return result\n')),
    ("safe_int", "a function `safe_int(text, default=0)` that parses an int and returns default on failure",
     ('def safe_int(text, default=0):\n    """Parse text as an int, or return default."""\n    try:\n'
     '        return int(text)\n    except (TypeError, ValueError):\n        return default\n')),
    ("ensure_list", "a helper `ensure_list(value)` that wraps a single value in a list",
     ('def ensure_list(value):\n    """Return value as a list."""\n    if value is None:\n        return []\n'
     '    if isinstance(value, (list, tuple)):\n        return list(value)\n    return [value]\n')),
    ("merge_dicts", "a function `merge_dicts(*dicts)` that merges dictionaries, later ones winning",
     ('def merge_dicts(*dicts):\n    """Merge the dictionaries; later keys win."""\n    merged = {}\n'
     '    for d in dicts:\n        merged.update(d)\n    return merged\n')),
    ("count_lines", "a function `count_lines(path)` that returns the number of lines in a file",
     ('def count_lines(path):\n    """Return the number of lines in the file at path."""\n'
     '    with open(path) as f:\n        return sum(1 for _ in f)\n')),
)


def _parse(text: str) -> ast.Module | None:
    """The syntax tree of ``text``, or None when it does not parse."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _pick(rng: random.Random, templates: tuple[str, ...], **kw) -> str:
    return rng.choice(templates).format(**kw)


def _words(name: str) -> str:
    return " ".join(w for w in re.split(r"_+|(?<=[a-z])(?=[A-Z])", name) if w).lower()


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _defs(tree: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(definition, parent) for every function and class."""
    out = []
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append((child, parent))
    return out


def _kind(node: ast.AST, parent: ast.AST) -> str:
    if isinstance(node, ast.ClassDef):
        return "class"
    return "method" if isinstance(parent, ast.ClassDef) else "function"


def _block_start(node: ast.AST) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1


def _docstring_expr(node: ast.AST):
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0]
    return None


def t_rename(text, tree, lines, rng):
    """Rename a function, class, module-level name or (inside its function) a parameter."""
    cands = [(n.name, _kind(n, p), None) for n, p in _defs(tree)]
    cands += [(t.id, "variable", None) for s in tree.body if isinstance(s, ast.Assign)
              for t in s.targets if isinstance(t, ast.Name)]
    for n, _ in _defs(tree):
        if not isinstance(n, ast.ClassDef):
            cands += [(a.arg, "parameter", n) for a in n.args.args if a.arg not in ("self", "cls")]
    cands = [c for c in cands if len(c[0]) >= 3 and not c[0].startswith("__")]
    if not cands:
        return None
    old, kind, scope = rng.choice(cands)
    word = rng.choice(WORDS)
    if old.isupper():
        new = rng.choice([f"{old}_{word.upper()}", f"DEFAULT_{old}", f"{word.upper()}_{old}"])
    elif kind == "class":
        new = rng.choice([f"{old}{word.capitalize()}", f"Base{old}", f"{old}Impl"])
    else:
        new = rng.choice([f"{old}_{word}", f"{word}_{old}", f"_{old}" if not old.startswith("_") else old[1:],
                          f"get_{old}" if kind != "parameter" else f"{old}_arg", f"new_{old}"])
    if not new or re.search(rf"\b{re.escape(new)}\b", text) or not new.isidentifier():
        return None
    pattern = re.compile(rf"\b{re.escape(old)}\b")
    if scope is None:
        after = pattern.sub(new, text)
        instr = _pick(rng, ("Rename `{o}` to `{n}`.", "Rename the {k} {o} to {n}.", "rename {o} -> {n}",
                            "Use the name `{n}` instead of `{o}`."), o=old, n=new, k=kind)
    else:
        a, b = _block_start(scope), scope.end_lineno
        after = "".join(lines[:a]) + pattern.sub(new, "".join(lines[a:b])) + "".join(lines[b:])
        instr = _pick(rng, ("Rename the parameter `{o}` of `{f}` to `{n}`.", "In {f}, rename argument {o} to {n}."),
                      o=old, n=new, f=scope.name)
    return instr, after


def t_delete_def(text, tree, lines, rng):
    """Delete a function, method or class (with its decorators and comment lines right above it)."""
    cands = [(n, p) for n, p in _defs(tree) if len(getattr(p, "body", [])) > 1 and n in p.body]
    if not cands:
        return None
    node, parent = rng.choice(cands)
    a, b = _block_start(node), node.end_lineno
    while a > 0 and lines[a - 1].strip().startswith("#"):
        a -= 1
    while b < len(lines) and not lines[b].strip() and (a == 0 or not lines[a - 1].strip()):
        b += 1  # do not leave a double gap
    instr = _pick(rng, ("Remove the `{n}` {k}.", "Delete the {k} `{n}`.", "Drop {n}, it is no longer used.",
                        "remove {k} {n}"), n=node.name, k=_kind(node, parent))
    return instr, "".join(lines[:a] + lines[b:])


def t_add_comment(text, tree, lines, rng):
    """Insert a given comment line above a definition."""
    defs = _defs(tree)
    if not defs:
        return None
    node, parent = rng.choice(defs)
    a = _block_start(node)
    words = _words(node.name)
    comment = rng.choice((f"TODO: add tests for {node.name}", f"Helper for {words}.", f"{words.capitalize()}.",
                          "NOTE: keep this in sync with the documentation.", "FIXME: slow for large inputs.",
                          f"Public API: {node.name}"))
    line = f"{_indent(lines[a])}# {comment}\n"
    instr = _pick(rng, ('Add a comment "{c}" above `{n}`.', "Add the comment `# {c}` before the {k} {n}.",
                        "Put a `# {c}` comment on top of {n}"), c=comment, n=node.name, k=_kind(node, parent))
    return instr, "".join(lines[:a] + [line] + lines[a:])


def t_remove_comments(text, tree, lines, rng):
    """Delete the full-line comments (not a shebang or encoding line)."""
    keep = [ln for i, ln in enumerate(lines) if not (ln.strip().startswith("#") and i >= 2)]
    if len(keep) == len(lines) or len(lines) - len(keep) > 0.3 * len(lines):
        return None
    return _pick(rng, ("Remove all comments.", "Delete the comment lines.", "Strip the comments from the file.",
                       "remove comments")), "".join(keep)


def t_add_docstring(text, tree, lines, rng):
    """Give a function that has none a one-line docstring."""
    cands = [(n, p) for n, p in _defs(tree) if not isinstance(n, ast.ClassDef) and _docstring_expr(n) is None
             and n.body[0].lineno > n.lineno and _indent(lines[n.body[0].lineno - 1]).strip() == ""]
    if not cands:
        return None
    node, parent = rng.choice(cands)
    first = _block_start(node.body[0])
    words = _words(node.name)
    if node.name.startswith("get_"):
        doc = f"Return the {_words(node.name[4:])}."
    elif node.name.startswith(("is_", "has_")):
        doc = f"Check whether {words.split(' ', 1)[-1]}."
    else:
        doc = f"{words.capitalize()}."
    line = f'{_indent(lines[first])}"""{doc}"""\n'
    instr = _pick(rng, ("Add a docstring to `{n}`.", "Document the {k} {n} with a docstring.",
                        "add docstring for {n}"), n=node.name, k=_kind(node, parent))
    return instr, "".join(lines[:first] + [line] + lines[first:])


def t_remove_docstring(text, tree, lines, rng):
    """Delete the docstring of a function, class or the module."""
    cands = [(n, _kind(n, p)) for n, p in _defs(tree)] + [(tree, "module")]
    cands = [(n, k) for n, k in cands if _docstring_expr(n) is not None and len(n.body) > 1]
    if not cands:
        return None
    node, kind = rng.choice(cands)
    doc = _docstring_expr(node)
    a, b = doc.lineno - 1, doc.end_lineno
    if lines[a].strip()[:1] not in "\"'rRuU" or ";" in lines[b - 1]:
        return None
    if kind == "module":
        while b < len(lines) and not lines[b].strip():
            b += 1
        instr = rng.choice(("Remove the module docstring.", "Delete the docstring at the top of the file."))
    else:
        instr = _pick(rng, ("Remove the docstring of `{n}`.", "Delete the docstring from the {k} {n}."),
                      n=node.name, k=kind)
    return instr, "".join(lines[:a] + lines[b:])


def t_change_constant(text, tree, lines, rng):
    """Change a numeric constant assigned at module or class level."""
    cands = []
    for scope in [tree] + [n for n, _ in _defs(tree) if isinstance(n, ast.ClassDef)]:
        for s in scope.body:
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                    and isinstance(s.value, ast.Constant) and type(s.value.value) in (int, float) \
                    and s.value.lineno == s.value.end_lineno:
                cands.append((s.targets[0].id, s.value))
    if not cands:
        return None
    name, const = rng.choice(cands)
    old = const.value
    new = rng.choice([old * 2, old + 1, old * 10, max(old - 1, 0)]) if isinstance(old, int) else \
        round(old * rng.choice([0.5, 2.0, 1.5]), 6)
    if new == old:
        return None
    raw = lines[const.lineno - 1].encode()
    line = (raw[: const.col_offset] + repr(new).encode() + raw[const.end_col_offset:]).decode()
    instr = _pick(rng, ("Change `{n}` from {o} to {v}.", "Set {n} to {v}.", "Update the value of {n} to {v}"),
                  n=name, o=old, v=new)
    return instr, "".join(lines[: const.lineno - 1] + [line] + lines[const.lineno:])


def _import_runs(tree: ast.Module, lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line ranges of >= 3 consecutive one-line top-level imports."""
    runs, start, prev = [], None, None
    for s in tree.body:
        one_line = isinstance(s, (ast.Import, ast.ImportFrom)) and s.lineno == s.end_lineno
        if one_line and prev is not None and s.lineno == prev + 1:
            prev = s.lineno
            continue
        if start is not None and prev - start >= 2:
            runs.append((start - 1, prev))
        start, prev = (s.lineno, s.lineno) if one_line else (None, None)
    if start is not None and prev - start >= 2:
        runs.append((start - 1, prev))
    return runs


def t_sort_imports(text, tree, lines, rng):
    """Sort a block of imports (or, when it is sorted, learn it from a shuffled copy)."""
    runs = _import_runs(tree, lines)
    if not runs:
        return None
    a, b = rng.choice(runs)
    block = lines[a:b]
    if not block[-1].endswith("\n"):
        return None
    instr = rng.choice(("Sort the imports alphabetically.", "Reorder the imports.", "sort imports"))
    if block != sorted(block):
        return instr, "".join(lines[:a] + sorted(block) + lines[b:])
    shuffled = block[:]
    rng.shuffle(shuffled)
    if shuffled == block:
        return None
    return instr, text, "".join(lines[:a] + shuffled + lines[b:])  # (instruction, after, new before)


def t_add_import(text, tree, lines, rng):
    """Add an import after the last top-level import."""
    mod = rng.choice(MODULES)
    if re.search(rf"^\s*(import|from)\s+{mod}\b", text, re.M):
        return None
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    if not imports:
        return None
    at = imports[-1].end_lineno
    instr = _pick(rng, ("Add `import {m}`.", "Import {m} at the top of the file.", "import {m}"), m=mod)
    return instr, "".join(lines[:at] + [f"import {mod}\n"] + lines[at:])


def t_remove_import(text, tree, lines, rng):
    """Delete a one-line top-level import."""
    cands = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)) and s.lineno == s.end_lineno]
    if len(cands) < 2:
        return None
    s = rng.choice(cands)
    stmt = lines[s.lineno - 1].strip()
    instr = _pick(rng, ("Remove the unused import `{s}`.", "Delete `{s}`.", "drop the import: {s}"), s=stmt)
    return instr, "".join(lines[: s.lineno - 1] + lines[s.lineno:])


def t_add_print(text, tree, lines, rng):
    """Print a message at the start of a function (after its docstring)."""
    cands = [n for n, _ in _defs(tree) if not isinstance(n, ast.ClassDef) and n.body[0].lineno > n.lineno]
    if not cands:
        return None
    node = rng.choice(cands)
    body = node.body[1:] if _docstring_expr(node) is not None and len(node.body) > 1 else node.body
    first = _block_start(body[0])
    indent = _indent(lines[first])
    if lines[first].strip() == "" or not indent:
        return None
    msg = rng.choice((f"{node.name} called", f"Entering {node.name}", f"DEBUG: {node.name}"))
    instr = _pick(rng, ('Print "{m}" at the start of `{n}`.', ("Add a print statement at the beginning of {n} "
                        'that prints "{m}".')), m=msg, n=node.name)
    return instr, "".join(lines[:first] + [f'{indent}print("{msg}")\n'] + lines[first:])


def t_add_function(text, tree, lines, rng):
    """Append a small new function."""
    name, what, code = rng.choice(NEW_FUNCTIONS)
    if re.search(rf"\b{name}\b", text):
        return None
    instr = _pick(rng, ("Add {w}.", "Add {w} at the end of the file.", "Implement {w}."), w=what)
    return instr, text.rstrip("\n") + "\n\n\n" + code


def _body_lines(node: ast.AST, lines: list[str]) -> tuple[int, int] | None:
    """Lines ``[a, b)`` (0-based) of a function's body after its docstring, or None when under two lines."""
    body = [s for s in node.body if s is not _docstring_expr(node)]
    if not body:
        return None
    a, b = min([body[0].lineno] + [d.lineno for d in getattr(body[0], "decorator_list", [])]) - 1, node.end_lineno
    if a + 1 <= node.lineno or b - a < 2 or not all(lines[i].strip() for i in (a, b - 1)):
        return None  # a body on the header's line, or too short
    return a, b


def _functions(tree: ast.AST) -> list[ast.AST]:
    return [n for n, _ in _defs(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def t_rewrite_body(text, tree, lines, rng, donor):
    """Replace a function's body (after its docstring) by the body of a function of another file: new text
    of the size of a real rewrite, not present anywhere in the prompt."""
    donor_tree = _parse(donor)
    if donor_tree is None:
        return None
    donor_lines = donor.splitlines(keepends=True)
    targets = [(n, r) for n in _functions(tree) if (r := _body_lines(n, lines))]
    sources = [r for n in _functions(donor_tree) if (r := _body_lines(n, donor_lines)) and r[1] - r[0] <= 40]
    if not targets or not sources:
        return None
    node, (a, b) = rng.choice(targets)
    c, d = rng.choice(sources)
    old_indent, new_indent = _indent(donor_lines[c]), _indent(lines[a])
    if not all(l.startswith(old_indent) or not l.strip() for l in donor_lines[c:d]):
        return None
    body = [new_indent + l[len(old_indent):] if l.strip() else l for l in donor_lines[c:d]]
    body[-1] = body[-1] if body[-1].endswith("\n") else body[-1] + "\n"
    instr = _pick(rng, ("Rewrite the body of `{n}`.", "Reimplement {n}.", "Change how `{n}` works.",
                        "New implementation of {n}."), n=node.name)
    return instr, "".join(lines[:a] + body + lines[b:])


def t_insert_foreign(text, tree, lines, rng, donor):
    """Insert a top-level function or class of another file after a top-level definition of this one."""
    donor_tree = _parse(donor)
    if donor_tree is None:
        return None
    donor_lines = donor.splitlines(keepends=True)
    cands = [n for n in donor_tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
             and 3 <= n.end_lineno - _block_start(n) <= 50 and not re.search(rf"\b{re.escape(n.name)}\b", text)]
    anchors = [n.end_lineno for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                   ast.ClassDef))] + [len(lines)]
    if not cands:
        return None
    node, at = rng.choice(cands), rng.choice(anchors)
    block = donor_lines[_block_start(node): node.end_lineno]
    block[-1] = block[-1] if block[-1].endswith("\n") else block[-1] + "\n"
    head = lines[:at]
    if head and not head[-1].endswith("\n"):
        head[-1] += "\n"
    kind = "class" if isinstance(node, ast.ClassDef) else "function"
    instr = _pick(rng, ("Add the {k} `{n}`.", "Add a {k} {n}.", "Implement `{n}`.", "New {k}: {n}."),
                  k=kind, n=node.name)
    return instr, "".join(head + ["\n", "\n"] + block + (["\n", "\n"] if lines[at:] else []) + lines[at:])


# Transforms that take text from a second file (``donor``): the new text of large rewrites.
DONOR_TRANSFORMS = (t_rewrite_body, t_insert_foreign)
TRANSFORMS = ((t_rewrite_body, 4), (t_insert_foreign, 2), (t_rename, 3), (t_delete_def, 2), (t_add_comment, 1),
              (t_remove_comments, 1), (t_add_docstring, 2), (t_remove_docstring, 2), (t_change_constant, 2),
              (t_sort_imports, 1), (t_add_import, 1), (t_remove_import, 1), (t_add_print, 1), (t_add_function, 1))


SPAN_SUBJECTS = ("Update the code.", "Refactor.", "Fix a bug.", "Clean up.", "Changes from review.",
                 "Rework this module.", "Small fixes.", "Improve the implementation.", "Sync with upstream.")
SPAN_KINDS = (("replace", 0.5), ("add", 0.3), ("remove", 0.2))


def _run_of(donor_lines: list[str], n: int, indent: str, rng: random.Random) -> list[str]:
    """``n`` consecutive lines of the donor from a random start (lines of a shorter donor repeat), their common
    indentation replaced by ``indent``; every line ends with a newline."""
    start = rng.randrange(len(donor_lines))
    run = [donor_lines[(start + i) % len(donor_lines)] for i in range(n)]
    run = [line if line.endswith("\n") else line + "\n" for line in run]
    common = min((len(_indent(line)) for line in run if line.strip()), default=0)
    return [indent + line[common:] if line.strip() else "\n" for line in run]


def span_edit(seed: int, text: str, donor: str, mode: str, max_places: int) -> dict | None:
    """A span edit of ``text`` (see the module docstring), or None when the file is too short or the draw
    falls outside (0, 0.6]: the share of changed lines is uniform in [0.02, 0.55], split over the places at
    random; a replaced span gets about as many new lines (log-normal factor), an added one its share."""
    rng = random.Random(seed)
    lines = text.splitlines(keepends=True)
    donor_lines = [line for line in donor.splitlines(keepends=True) if len(line) <= 200]
    if len(lines) < 8 or not donor_lines:
        return None
    if not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    n_places = min(rng.choices((1, 2, 3, 4, 5), (0.3, 0.25, 0.2, 0.15, 0.1))[0], len(lines) // 4)
    total = max(n_places, round(rng.uniform(0.02, 0.55) * len(lines)))
    cuts = sorted(rng.sample(range(1, total), n_places - 1)) if n_places > 1 and total > n_places else []
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [total])] or [total]
    kinds = [rng.choices(*zip(*SPAN_KINDS))[0] for _ in sizes]
    # each place starts after at least one kept line; the last add may end the file
    room = len(lines) - sum(n for n, k in zip(sizes, kinds) if k != "add") - len(sizes)
    if room < 1:
        return None
    starts = sorted(rng.sample(range(room + 1), len(sizes)))
    if kinds[-1] == "add" and rng.random() < 0.3:
        starts[-1] = room + 1  # at the end of the file
    out, at, shift = [], 0, 0
    for start, size, kind in zip(starts, sizes, kinds):
        begin = start + shift + 1  # the kept line(s) before the place
        old = 0 if kind == "add" else size
        new = 0 if kind == "remove" else size if kind == "add" else max(1, round(size * math.exp(rng.gauss(0, 0.5))))
        begin = min(begin, len(lines))
        out += lines[at:begin]
        ref = lines[begin] if begin < len(lines) and lines[begin].strip() else lines[begin - 1]
        out += _run_of(donor_lines, new, _indent(ref), rng) if new else []
        at = min(begin + old, len(lines))
        shift += old + 1
    after = "".join(out + lines[at:])
    before = "".join(lines)
    norm = edit_norm(before, after)
    if not 0 < norm <= 0.6:
        return None
    return {"instruction": change_request(before, after, rng.choice(SPAN_SUBJECTS), mode, max_places),
            "before": before, "after": after, "kinds": ["span_edit"], "char_edit_norm": norm}


def synthetic_edit(args: tuple) -> dict | None:
    """One synthetic edit of a Python file, or None: instruction, before, after, kinds, char_edit_norm.

    ``args``: (seed, file text, donor file text, change-request mode, max places[, span share]); with
    probability ``span share`` (default 0) a :func:`span_edit`, else 1-4 transforms, the instruction being
    the change request built from the transforms' own instructions."""
    seed, text, donor, mode, max_places = args[:5]
    rng = random.Random(seed)
    if len(args) > 5 and rng.random() < args[5]:
        return span_edit(seed, text, donor, mode, max_places)
    funcs, weights = zip(*TRANSFORMS)
    before, after, instructions, kinds = text, text, [], []
    n_edits = rng.choices((1, 2, 3, 4), (0.4, 0.3, 0.2, 0.1))[0]
    for _ in range(10):
        if len(kinds) == n_edits:
            break
        tree = _parse(after)
        if tree is None:
            return None
        func = rng.choices(funcs, weights)[0]
        if func.__name__ in kinds:
            continue
        extra = (donor,) if func in DONOR_TRANSFORMS else ()
        got = func(after, tree, after.splitlines(keepends=True), rng, *extra)
        if got is None or got[1] == after:
            continue
        if len(got) == 3:  # a transform that rewrites the input instead (sorted imports)
            if kinds:
                continue
            before = got[2]
        instructions.append(got[0] if got[0].endswith(".") else got[0] + ".")
        after = got[1]
        kinds.append(func.__name__)
    if not kinds:
        return None
    if _parse(after) is None:
        return None
    norm = edit_norm(before, after)
    if not 0 < norm <= 0.6:
        return None
    return {"instruction": change_request(before, after, " ".join(instructions), mode, max_places),
            "before": before, "after": after, "kinds": kinds, "char_edit_norm": norm}
