"""The figures' look (matplotlib settings, labels and colours per method and model) and where they are saved."""

from __future__ import annotations

import logging
import os

import matplotlib

matplotlib.use("Agg")
logging.getLogger("fontTools").setLevel(logging.ERROR)
import matplotlib.pyplot as plt  # noqa: E402

from paper.sections import tex  # noqa: E402

plt.rcParams.update({
    "font.family": "serif", "font.serif": ["LM Roman 10", "DejaVu Serif"], "mathtext.fontset": "cm",
    "font.size": 8, "axes.titlesize": 8.5, "axes.labelsize": 8, "legend.fontsize": 6.8,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False,
    "pdf.fonttype": 3, "savefig.bbox": "tight", "savefig.pad_inches": 0.02, "lines.linewidth": 1.2,
})
POLICY_LABEL = {"ngram": "n-gram alone", "eagle": "EAGLE alone (modelled)", "prefer-ngram": "hybrid, prefer-ngram",
                "tree": "hybrid, tree (both drafts)"}
MODEL_LABEL = {"harmonic_pr": "harmonic (PR parameters)", "harmonic_fit": "harmonic, $AL_N$ fitted",
               "harmonic_free": "harmonic, both fitted", "resync": "re-sync (edit norm)",
               "resync_runs": "re-sync (measured runs)"}
MODEL_STYLE = {"harmonic_pr": dict(color="#d62728", ls="--"), "harmonic_fit": dict(color="#ff9896", ls=":"),
               "harmonic_free": dict(color="#9467bd", ls="-."), "resync": dict(color="#2ca02c", ls="-"),
               "resync_runs": dict(color="#1f77b4", ls="-")}
METHOD_LABEL = {"none": "plain", "ngram": "n-gram", "eagle": "EAGLE-1", "eagle3": "EAGLE-3",
                "ngram-eagle": "n-gram + EAGLE-1", "ngram-eagle3": "n-gram + EAGLE-3"}
METHOD_COLOR = {"ngram": "#1f77b4", "eagle": "#ff7f0e", "eagle3": "#8c564b", "ngram-eagle": "#2ca02c",
                "ngram-eagle3": "#9467bd", "none": "#7f7f7f"}
EAGLE_TREE, HYBRID_TREE = "eagle3 (dynamic eagle tree)", "ngram-eagle3 tree (dynamic eagle tree)"  # spec_bench variants
VARIANT_LABEL = {**METHOD_LABEL, "ngram-eagle tree": "n-gram + EAGLE-1, tree", EAGLE_TREE: "EAGLE-3 dynamic tree",
                 HYBRID_TREE: "n-gram + EAGLE-3 dynamic tree"}
VARIANT_COLOR = {**METHOD_COLOR, "ngram-eagle tree": "#d62728", EAGLE_TREE: "#e377c2", HYBRID_TREE: "#17becf"}


def legend_below(fig, ax, ncol: int, y: float) -> None:
    """One legend for the whole figure, from ``ax``'s handles, centred below the panels at height ``y``."""
    h, lab = ax.get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, y), frameon=False)


def savefig(fig, name: str) -> None:
    """paper/figures/<name>.pdf, without a creation date so that rebuilding the same figure gives the same file,
    written beside it and renamed over it (a kill leaves the old file or the new); nothing when figures are off
    (``tex.FIG`` is None)."""
    if tex.FIG is None:
        plt.close(fig)
        return
    tex.FIG.mkdir(parents=True, exist_ok=True)
    path = tex.FIG / f"{name}.pdf"
    tmp = path.with_name(f".{name}.tmp.pdf")  # beside it, so that the rename replaces it at once
    try:
        fig.savefig(tmp, metadata={"CreationDate": None})
        os.replace(tmp, path)
    except BaseException:  # a kill too: no partial file left
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    print(f"wrote {tex.shown(tex.FIG / name)}.pdf")
