"""Project scripts: benchmarks, sweeps, training and result loaders (not part of the installed library)."""
