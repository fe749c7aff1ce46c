"""The paper builds from its committed figures, tables and numbers.tex, which make_figures reproduces from the
results files, and its first page renders; documents say nothing about how the work went ("session")."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "paper"


def _documents() -> list[Path]:
    """README.md, docs/*.md, paper/*.tex, notebooks/*.ipynb and hybridsd/**/*.py."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(PAPER.glob("*.tex")),
            *sorted((REPO / "notebooks").glob("*.ipynb")), *sorted((REPO / "hybridsd").rglob("*.py"))]


def test_documents_do_not_say_session():
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()[:100]}"
            for p in _documents() if p.is_file()
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if re.search("session", line, re.I)]
    assert not hits, "\n".join(hits)


def test_every_input_of_the_paper_is_committed():
    """Each \\input and \\includegraphics of hybridsd.tex names a file in paper/ (the generated ones are committed)."""
    tex = (PAPER / "hybridsd.tex").read_text()
    names = re.findall(r"\\input\{([^}]+)\}", tex) + re.findall(r"\\includegraphics(?:\[[^]]*\])?\{([^}]+)\}", tex)
    assert len(names) > 10
    missing = [n for n in names if not (PAPER / n).is_file()]
    assert not missing, missing


def test_every_number_macro_the_paper_uses_is_defined():
    """Macros of numbers.tex are letters only and defined once; every lowercase-initial camel-case macro the paper
    uses (``\\simN``, ``\\gpuALCodeNgramFive``) is one of them, each of them is used by the paper or its tables,
    and the pointers into it of the README and docs/*.md name defined ones."""
    defined = re.findall(r"\\newcommand\{\\([A-Za-z]+)\}", (PAPER / "numbers.tex").read_text())
    assert len(defined) == len(set(defined)) > 100
    tex = (PAPER / "hybridsd.tex").read_text()
    own = {"code", "AL"}
    used = {m for m in re.findall(r"\\([a-z]+[A-Z][A-Za-z]*)", tex)} - own
    assert not used - set(defined), sorted(used - set(defined))
    tables = "".join(p.read_text() for p in sorted((PAPER / "tables").glob("*.tex")))
    unused = [m for m in defined if not re.search(rf"\\{m}(?![A-Za-z])", tex + tables)]
    assert not unused, unused[:10]  # numbers.tex holds the numbers the paper quotes, no others
    for doc in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))):
        pointers = set(re.findall(r"`\\([a-z]+[A-Z][A-Za-z]*)`", doc.read_text()))
        assert not pointers - set(defined), (doc.name, sorted(pointers - set(defined)))
        assert pointers or doc.name == "reference.md", doc.name  # README and zoo.md quote the paper's numbers


def test_committed_numbers_and_tables_are_what_make_figures_writes(tmp_path):
    """No number is typed in by hand or left stale: regenerating from experiments/results gives the committed
    numbers.tex and tables (figures are not drawn here)."""
    pytest.importorskip("pandas")
    pytest.importorskip("tokenizers")
    from hybridsd import data

    try:
        data.default_data_dir()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from paper import make_figures

    assert make_figures.main(["--out", str(tmp_path), "--no-figures"]) == 0
    assert (tmp_path / "numbers.tex").read_text() == (PAPER / "numbers.tex").read_text()
    names = sorted(p.name for p in (tmp_path / "tables").iterdir())
    assert names == sorted(p.name for p in (PAPER / "tables").iterdir())
    for new in (tmp_path / "tables").iterdir():
        assert new.read_text() == (PAPER / "tables" / new.name).read_text(), new.name


@pytest.mark.skipif(shutil.which("latexmk") is None or shutil.which("pdftoppm") is None,
                    reason="needs latexmk and pdftoppm (apt-get install latexmk poppler-utils texlive-...)")
def test_paper_builds_and_first_page_renders(tmp_path):
    src = tmp_path / "paper"
    src.mkdir()
    for name in ("hybridsd.tex", "numbers.tex"):
        shutil.copy(PAPER / name, src / name)
    for folder in ("figures", "tables"):
        shutil.copytree(PAPER / folder, src / folder)
    build = subprocess.run(["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-outdir=build",
                            "hybridsd.tex"], cwd=src, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-2000:]
    pdf = src / "build" / "hybridsd.pdf"
    assert pdf.stat().st_size > 50_000
    log = (src / "build" / "hybridsd.log").read_text(errors="replace")
    assert "undefined references" not in log and "Citation" not in log, "unresolved references"
    subprocess.run(["pdftoppm", "-png", "-r", "60", "-f", "1", "-l", "1", "-singlefile", str(pdf),
                    str(tmp_path / "page1")], check=True, timeout=60)
    png = tmp_path / "page1.png"
    assert png.stat().st_size > 20_000
    from PIL import Image

    img = Image.open(png).convert("L")
    assert img.width > 400 and img.height > 500
    dark = sum(img.histogram()[:128]) / (img.width * img.height)
    assert 0.01 < dark < 0.5, dark  # text on a white page: neither blank nor black


def test_exact_acceptance_sentence_counts_the_rows_that_record_it():
    from paper.sections.exact import accepted_sentence

    row = {"model": "tiny-llama", "drafter": "ngram-eagle1-tree", "exact_accepted": {"ngram": 5, "eagle1": 3},
           "exact_drafted": 20}
    starved = dict(row, drafter="ngram-eagle3", exact_accepted={"ngram": 7}, exact_drafted=10)
    text = accepted_sentence([row, starved, {"model": "tiny-coder", "drafter": "ngram"}])
    assert "over the 2 configurations of tiny-llama" in text and "15 of 30 draft tokens" in text
    assert "in 1 of them every drafter" in text  # the hybrid whose EAGLE child had none accepted is not counted
    assert accepted_sentence([{"model": "m", "drafter": "ngram", "exact_same": "6/6"}]) == ""


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_an_out_that_is_not_a_folder_is_one_line_before_any_work(where, tmp_path, capsys, monkeypatch):
    from paper import make_figures

    monkeypatch.setattr(make_figures.simulation, "make", lambda: pytest.fail("work began before --out was checked"))
    (tmp_path / "file").write_text("x")
    out = {"file": tmp_path / "file", "under_file": tmp_path / "file" / "paper"}[where]
    with pytest.raises(SystemExit) as e:
        make_figures.main(["--out", str(out), "--no-figures"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and f"--out {out}" in err[0], err


class Killed(BaseException):
    """A kill: not an Exception, so nothing on the way catches it."""


def test_a_write_killed_midway_leaves_the_old_file_and_no_other(tmp_path, monkeypatch):
    """numbers.tex and the tables (tex.write) and the figures (style.savefig) are written beside their file and
    renamed over it: a kill midway leaves the old file whole and no partial one."""
    import matplotlib.figure
    import matplotlib.pyplot as plt

    from paper.sections import style, tex

    def killed(*a, **k):
        raise Killed

    path = tmp_path / "tables" / "t.tex"
    tex.write(path, "old\n")
    with monkeypatch.context() as m:
        m.setattr("os.fsync", killed)  # the new text written, not yet on disk
        with pytest.raises(Killed):
            tex.write(path, "new\n")
    assert path.read_text() == "old\n" and [p.name for p in path.parent.iterdir()] == ["t.tex"]

    def torn(self, fname, **kw):  # killed halfway through the PDF
        open(fname, "wb").write(b"%PDF-1.4 torn")
        raise Killed

    monkeypatch.setattr(tex, "FIG", tmp_path / "figures")
    style.savefig(plt.figure(), "f")
    before = (tmp_path / "figures" / "f.pdf").read_bytes()
    with monkeypatch.context() as m:
        m.setattr(matplotlib.figure.Figure, "savefig", torn)
        with pytest.raises(Killed):
            style.savefig(plt.figure(), "f")
    assert (tmp_path / "figures" / "f.pdf").read_bytes() == before and before.startswith(b"%PDF")
    assert [p.name for p in (tmp_path / "figures").iterdir()] == ["f.pdf"] and not plt.get_fignums()
