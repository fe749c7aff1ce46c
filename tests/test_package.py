"""Package hygiene: the public API exists, imports point one way."""

import ast
import sys
from pathlib import Path

import hybridsd as hsd

API = ["ngram_propose", "NgramDrafter", "EagleHead", "EagleDrafter", "HybridDrafter", "generate", "SpecStats",
       "zoo"]


def test_public_names_exist():
    """The documented names are exported, each one hybridsd's own object (not a re-exported dependency's)."""
    assert set(API) <= set(hsd.__all__) and len(set(hsd.__all__)) == len(hsd.__all__)
    for name in hsd.__all__:
        obj = getattr(hsd, name)
        home = obj.__name__ if isinstance(obj, type(sys)) else obj.__module__
        assert home.startswith("hybridsd."), (name, home)


def _imports(module) -> set[str]:
    """Top-level packages a module's source imports."""
    tree = ast.parse(Path(module.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_theory_modules_do_not_import_torch():
    for module in (hsd.analytic, hsd.fit, hsd.edit_distance):
        assert not _imports(module) & {"torch", "transformers", "numba"}, module.__name__


def test_generate_is_the_function():
    import hybridsd.generate  # noqa: F401  (importing the submodule must not shadow the function)

    assert callable(hsd.generate) and hsd.generate.__name__ == "generate"


def test_transformers_stays_in_its_modules():
    """transformers only in the target adapter, the EAGLE loader and config (its rope functions), sampling (its
    logits warpers), data/prompt building, the zoo and the checkpoint loader."""
    allowed = {"target.py", "eagle/loader.py", "eagle/config.py", "sampling.py", "data.py", "prompts.py", "zoo.py",
               "checkpoint.py"}
    root = Path(hsd.__file__).parent
    for f in root.rglob("*.py"):
        src = f.read_text()
        if "import transformers" in src or "from transformers" in src:
            assert f.relative_to(root).as_posix() in allowed, f


def _module_imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The ``hybridsd`` modules that the module ``name`` (file ``path``) imports anywhere in its source (inside
    functions too; not under ``if TYPE_CHECKING:``, which never runs)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for child in node.body for n in ast.walk(child)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        out |= {m for m in found if m in modules}
    return out - {name}


def test_import_graph_has_no_cycle():
    """No module of ``hybridsd`` imports, directly or through others, a module that imports it back."""
    root = Path(hsd.__file__).parent
    files = {("hybridsd." + ".".join(f.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): f
             for f in root.rglob("*.py")}
    graph = {name: _module_imports(f, name, set(files)) for name, f in files.items()}
    assert graph["hybridsd.eagle.model"] >= {"hybridsd.eagle.loader", "hybridsd.eagle.config"}  # the walk sees imports
    for start in graph:  # slow and obvious: every path from every module, depth first
        stack = [(start, (start,))]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                assert nxt != start, "import cycle: " + " -> ".join(path + (start,))
                if nxt not in path:
                    stack.append((nxt, path + (nxt,)))


def test_import_is_lazy_and_names_resolve_cold():
    """``import hybridsd`` loads neither torch nor scipy; the names resolve on first use in a fresh process, and
    importing the submodule first still leaves ``hsd.generate`` the function."""
    import subprocess

    code = ("import sys, hybridsd as hsd; heavy = {'torch', 'scipy', 'transformers', 'numba'} & set(sys.modules); "
            "assert not heavy, heavy; import hybridsd.generate; assert callable(hsd.generate); "
            "assert hsd.EagleHead.__name__ == 'EagleHead' and hsd.zoo.__name__ == 'hybridsd.zoo'; "
            "from hybridsd import SpecStats, analytic; assert 'scipy' not in sys.modules; "
            "from hybridsd import fit; assert 'scipy' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
