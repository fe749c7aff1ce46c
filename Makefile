# Paper: every figure, table and quoted number is regenerated from experiments/results by paper/make_figures.py
# (`python -m paper.make_figures`, one module per part of the paper in paper/sections/).
PYTHON ?= python
LATEXMK ?= latexmk

.PHONY: paper figures clean-paper

figures:
	$(PYTHON) -m paper.make_figures

paper: figures
	cd paper && $(LATEXMK) -pdf -interaction=nonstopmode -halt-on-error -outdir=build hybridsd.tex
	cp paper/build/hybridsd.pdf paper/hybridsd.pdf
	@echo "built paper/hybridsd.pdf"

clean-paper:
	rm -rf paper/build paper/hybridsd.pdf
