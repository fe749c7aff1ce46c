"""The paper's generators: ``python -m paper.make_figures`` writes its figures, tables and numbers."""
