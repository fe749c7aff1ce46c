"""The notebooks run without errors on the saved results (skipped when a results file they read is missing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("seaborn")

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "experiments" / "results"
DATA = Path(os.environ.get("HYBRIDSD_DATA") or REPO.parent / "shared" / "data")  # as hybridsd.data finds it
SWEEP_GPU, SWEEP_CPU = RESULTS / "sweeps" / "zoo_h200_bf16", RESULTS / "sweeps" / "zoo_cpu_fp32"
NEEDS = {
    "theory_vs_measurement": [RESULTS / "simulation" / "simulate_al.json", SWEEP_GPU,
                              SWEEP_CPU / "code-edits__ngram__k5.jsonl", DATA / "code_edits_dev.jsonl"],
    "hybrid_al": [SWEEP_GPU, SWEEP_GPU / "sweep.json"],
    "bos_sensitivity": [SWEEP_GPU, SWEEP_CPU],
    "speed": [*(RESULTS / "speed" / f for f in ("steps_and_baselines.json", "steps_auto.json", "overhead_zoo.json",
                                               "launch.json", "bench_linear.json", "conditions.json", "overhead.json",
                                               "loop_profile_graph.json", "gpu_tests.log")), SWEEP_GPU],
}


def _present(path: Path) -> bool:
    return path.is_file() or (path.is_dir() and any(path.glob("*.jsonl")))


def test_every_notebook_is_listed():
    assert {p.stem for p in (REPO / "notebooks").glob("*.ipynb")} == set(NEEDS)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_notebook_runs(name):
    missing = [str(p.relative_to(REPO) if p.is_relative_to(REPO) else p) for p in NEEDS[name] if not _present(p)]
    if missing:
        pytest.skip(f"results missing: {missing}")
    path = REPO / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=60, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])), "no figure drawn"
