"""Every figure, table and quoted number of paper/hybridsd.tex, from the results files.

    python -m paper.make_figures            # from the repository root; or: make figures
    python -m paper.make_figures --out DIR  # the same files under DIR instead of paper/
    python -m paper.make_figures --out DIR --no-figures   # numbers.tex and tables only (a quick check)

Each part of the paper has its module in paper/sections/ and reads only its own files (no number is typed in by
hand):

- simulation   experiments/results/simulation/simulate_al.json: trace simulation of real code edits, model fits
- zoo          hybridsd/models/tiny-coder/ (training_config*.json, heads_training_*): the zoo model, its heads;
               EAGLE-3 against EAGLE-1 in the edit-norm sweep
- edit_norm    experiments/results/sweeps/edit_norm_h200_bf16/ (GPU): AL per edit-norm bin, the corpus table; the same
               configurations on every held-out edit (sweeps/edit_norm_all_heldout_h100_bf16/)
- sweep        experiments/results/sweeps/zoo_cpu_fp32/ (CPU): data sets x methods x k, doubled BOS
- theory       the GPU edit-norm sweep's code edits against the analytic models (also reads the data directory's
               code_edits_dev.jsonl for the input files and tiny-coder's tokenizer); EAGLE by n-gram state from
               experiments/results/zoo/al_by_edit_norm.json and eagle1_by_ngram_state_other_prompts.json; the models
               against every held-out edit from zoo/al_by_edit_norm_all_heldout.json
- speed        experiments/results/speed/: 8B-shape step times and ratios, draft cost, loop overhead, tiny-coder end
               to end, the diagnostic runs, the n-gram proposer
- trees        experiments/results/trees/bench_tree.json
- exact        experiments/results/exact/
- real_models  experiments/results/real_models/

Writes paper/figures/*.pdf, paper/tables/*.tex and paper/numbers.tex (one ``\\newcommand`` per quoted number).
"""

from __future__ import annotations

import sys
from pathlib import Path

from experiments.cli import Parser
from paper.sections import edit_norm, exact, real_models, simulation, speed, sweep, tex, theory, trees, zoo


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=tex.PAPER, help="folder for figures/, tables/ and numbers.tex")
    ap.add_argument("--no-figures", action="store_true", help="write numbers.tex and the tables only")
    args = ap.parse_args(argv)
    ap.check_output(args.out, folder=True)
    out = args.out
    tex.FIG, tex.TAB = (None if args.no_figures else out / "figures"), out / "tables"
    tex.NUMBERS.clear()
    simulation.make()
    zoo.make()
    edit_norm.make()
    sweep.make()
    theory.make(edit_norm.load())
    theory.eagle_by_state()
    theory.held_out()
    theory.other_repository()
    edit_norm.all_held_out()
    theory.all_held_out()
    speed.make()
    trees.make()
    exact.make()
    real_models.make()
    cited = "".join(p.read_text() for p in [tex.PAPER / "hybridsd.tex", *sorted(tex.TAB.glob("*.tex"))])
    tex.write(out / "numbers.tex", tex.numbers_tex(cited))  # the numbers the paper quotes
    return 0


if __name__ == "__main__":
    sys.exit(main())
