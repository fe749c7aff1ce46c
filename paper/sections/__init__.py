"""One module per part of the paper, each writing that part's figures, tables and ``\\newcommand`` numbers from
``experiments/results`` (see :mod:`paper.make_figures`)."""
