"""The notebooks run without errors on the saved results (skipped when a results file they read is missing)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

if not all(importlib.util.find_spec(m) for m in ("nbformat", "nbclient", "seaborn")):  # seaborn: in the kernel
    pytest.skip("needs nbformat, nbclient and seaborn", allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "experiments" / "results"
SWEEP_GPU, SWEEP_CPU = RESULTS / "sweeps" / "edit_norm_h200_bf16", RESULTS / "sweeps" / "zoo_cpu_fp32"
NEEDS = {
    "theory_vs_measurement": [RESULTS / "simulation" / "simulate_al.json", SWEEP_GPU,
                              RESULTS / "zoo" / "al_by_edit_norm.json", SWEEP_CPU],
    "hybrid_al": [SWEEP_GPU],  # the CPU sweep and the CPU tree runs: their sections say so when absent
    "bos_sensitivity": [SWEEP_CPU / "code-edits__eagle3__k3__bos-doubled.jsonl",
                        SWEEP_CPU / "code-edits__none__bos-doubled.jsonl"],
    "speed": [*(RESULTS / "speed" / f for f in ("steps_and_baselines.json", "steps_auto.json", "overhead_zoo.json",
                                               "launch.json", "bench_linear.json",
                                               "conditions.json", "overhead.json", "loop_profile_graph.json",
                                               "gpu_tests.log", "hf_eager_warm.json", "hf_eager_warm_repeat.json")),
              SWEEP_GPU],
}
# Before each notebook: an empty namespace and no open figures, as in a fresh kernel (imported modules stay loaded)
FRESH = "%reset -f\nimport matplotlib.pyplot\nmatplotlib.pyplot.close('all')\ndel matplotlib"


def _present(path: Path) -> bool:
    return path.is_file() or (path.is_dir() and any(path.glob("*.jsonl*")))


def _missing(name: str) -> list[str]:
    return [str(p.relative_to(REPO) if p.is_relative_to(REPO) else p) for p in NEEDS[name] if not _present(p)]


@pytest.fixture(scope="module")
def executed(request) -> dict[str, list]:
    """The selected notebooks whose results are present, run in one kernel, one after the other, each from an
    empty namespace; a failing cell does not stop the others. Name -> its executed code cells."""
    import nbclient
    import nbformat

    selected = {item.callspec.params["name"] for item in request.session.items
                if item.module is request.module and item.originalname == "test_notebook_runs"}
    combined = nbformat.v4.new_notebook()
    spans = {}
    for name in sorted(n for n in selected if not _missing(n)):
        nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        combined.cells.append(nbformat.v4.new_code_cell(FRESH))
        spans[name] = (len(combined.cells), len(combined.cells) + len(code))
        combined.cells += code
    nbclient.NotebookClient(combined, timeout=60, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    assert not [o for c in combined.cells if c.source == FRESH for o in c.outputs if o.output_type == "error"]
    return {name: combined.cells[a:b] for name, (a, b) in spans.items()}


def test_every_notebook_is_listed():
    assert {p.stem for p in (REPO / "notebooks").glob("*.ipynb")} == set(NEEDS)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_notebook_runs(name, executed):
    if missing := _missing(name):
        pytest.skip(f"results missing: {missing}")
    errors = [f"{c.source}\n{o.ename}: {o.evalue}" for c in executed[name] for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors, errors[0]  # the first failing cell and its error (the later ones may follow from it)
    outputs = [o for c in executed[name] for o in c.get("outputs", [])]
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {}) for o in outputs), \
        "no figure drawn"
