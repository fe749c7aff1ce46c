"""Package hygiene: the public API exists, imports point one way."""

import ast
import sys
from pathlib import Path

import hybridsd as hsd

API = ["ngram_propose", "NgramDrafter", "EagleHead", "EagleDrafter", "HybridDrafter", "generate", "SpecStats",
       "zoo"]


def test_public_names_exist():
    for name in API + hsd.__all__:
        assert getattr(hsd, name) is not None


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
    for module in (hsd.analytic, hsd.edit_distance):
        assert not _imports(module) & {"torch", "transformers", "numba"}, module.__name__


def test_generate_is_the_function():
    import hybridsd.generate  # noqa: F401  (importing the submodule must not shadow the function)

    assert callable(hsd.generate) and hsd.generate.__name__ == "generate"


def test_transformers_stays_in_its_modules():
    """transformers only in the target adapter, the EAGLE loader, data/prompt building, the zoo and the
    checkpoint loader."""
    allowed = {"target.py", "loader.py", "data.py", "prompts.py", "zoo.py", "checkpoint.py"}
    for f in Path(hsd.__file__).parent.rglob("*.py"):
        src = f.read_text()
        if "import transformers" in src or "from transformers" in src:
            assert f.name in allowed, f


def test_import_is_lazy_and_names_resolve_cold():
    """``import hybridsd`` loads neither torch nor scipy; the names resolve on first use in a fresh process, and
    importing the submodule first still leaves ``hsd.generate`` the function."""
    import subprocess

    code = ("import sys, hybridsd as hsd; heavy = {'torch', 'scipy', 'transformers', 'numba'} & set(sys.modules); "
            "assert not heavy, heavy; import hybridsd.generate; assert callable(hsd.generate); "
            "assert hsd.EagleHead.__name__ == 'EagleHead' and hsd.zoo.__name__ == 'hybridsd.zoo'; "
            "from hybridsd import SpecStats, analytic; assert 'scipy' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
