# Notebooks: `make notebooks` (or NB=notebooks/hybrid_al.ipynb for one) executes them in place on the saved results.
# Paper: every figure, table and quoted number is regenerated from experiments/results by paper/make_figures.py
# (`python -m paper.make_figures`, one module per part of the paper in paper/sections/).
PYTHON ?= python
LATEXMK ?= latexmk

.PHONY: paper figures clean-paper notebooks

figures:
	$(PYTHON) -m paper.make_figures

paper: figures
	cd paper && $(LATEXMK) -pdf -interaction=nonstopmode -halt-on-error -outdir=build hybridsd.tex
	cp paper/build/hybridsd.pdf paper/hybridsd.pdf
	@echo "built paper/hybridsd.pdf"

clean-paper:
	rm -rf paper/build paper/hybridsd.pdf

NB ?= $(wildcard notebooks/*.ipynb)
notebooks:
	for nb in $(NB); do \
	  $(PYTHON) -c "import nbclient, nbformat, sys; nb = nbformat.read(sys.argv[1], 4); \
	    nbclient.NotebookClient(nb, timeout=900, kernel_name='python3', \
	      resources={'metadata': {'path': 'notebooks'}}).execute(); nbformat.write(nb, sys.argv[1])" $$nb || exit 1; \
	done
