"""The sweep's presets: every one builds its grid (one config per file name, an output length for each dataset),
and the PR grid holds exactly the PR's configurations."""

from __future__ import annotations

import pytest

from experiments import sweep


@pytest.mark.parametrize("name", sorted(sweep.PRESETS))
def test_every_preset_builds_its_grid(name):
    preset = sweep.PRESETS[name]
    runs = sweep.grid(preset, device="cpu")
    stems = [s for s, _ in runs]
    assert runs and len(set(stems)) == len(stems)
    assert len({c.key() for _, c in runs}) == len(runs)  # no two files run the same config
    assert {c.dataset_name for _, c in runs} == set(preset.datasets) <= set(sweep.DATASETS)
    assert all(c.output_len == preset.output_len[c.dataset_name] for _, c in runs)


def test_pr_grid_is_the_prs_configurations():
    runs = dict(sweep.grid(sweep.PRESETS["edit-norm"], device="cpu"))
    assert {c.method for c in runs.values()} == {"none", *sweep.SPEC_METHODS}
    assert all(c.k.get("ngram", 5) == 5 and c.k.get("eagle", 3) == 3 for c in runs.values() if c.method != "none")
