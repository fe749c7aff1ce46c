"""Package hygiene: the public API exists, imports point one way."""

import subprocess
import sys

import hybridsd as hsd

API = ["ngram_propose", "NgramDrafter", "EagleHead", "EagleDrafter", "HybridDrafter", "generate", "SpecStats",
       "zoo"]


def test_public_names_exist():
    for name in API + hsd.__all__:
        assert getattr(hsd, name) is not None


def test_theory_modules_do_not_import_torch():
    code = ("import sys, hybridsd, hybridsd.analytic, hybridsd.edit_distance; "
            "bad = [m for m in ('torch', 'transformers', 'numba') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_transformers_stays_in_its_modules():
    code = ("import sys, hybridsd.generate, hybridsd.drafters.hybrid, hybridsd.eagle.model, "
            "hybridsd.drafters.eagle, hybridsd.simulate, hybridsd.analytic; "
            "assert 'transformers' in sys.modules  # via target.py, the adapter\n"
            "import importlib, pathlib\n"
            "root = pathlib.Path(hybridsd.generate.__file__).parent\n"
            "allowed = {'target.py', 'loader.py', 'data.py', 'prompts.py', 'zoo.py', 'provenance.py'}\n"
            "for f in root.rglob('*.py'):\n"
            "    src = f.read_text()\n"
            "    if 'import transformers' in src or 'from transformers' in src:\n"
            "        assert f.name in allowed, f\n")
    subprocess.run([sys.executable, "-c", code], check=True)
