"""Train the byte-level BPE tokenizer of the ``tiny-coder`` target model, offline, on the CPU.

Training text: Python sources installed on this machine (the stdlib and site-packages, without the packages
of the evaluation repositories, see ``EXCLUDED_PACKAGES``), the English package descriptions of the
installed distributions (``*.dist-info/METADATA``) and the MT-Bench questions. The file list is sorted,
shuffled with a fixed seed and capped, so a rerun on the same machine gives the same tokenizer.

Output (``hybridsd/models/tiny-coder/``): ``tokenizer.json`` plus what
``PreTrainedTokenizerFast.save_pretrained`` writes next to it. The tokenizer has Llama-3-like special tokens and
chat template, adds BOS when ``add_special_tokens=True`` (so the doubled-BOS mistake reproduces), has no
normalizer and round-trips any text exactly (``decode(encode(code)) == code``).

    python -m experiments.train_tokenizer            # full run (about 1-2 minutes on 2 cores)
    python -m experiments.train_tokenizer --smoke    # tiny corpus, written to /tmp (or --out), for testing

The files are written to ``OUT/.tokenizer.partial`` and then moved into OUT one by one (each replaces its
namesake at once), ``tokenizer_training.json`` last; a rerun deletes what a killed run left there.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from experiments.cli import Parser
from experiments.distributed import write_atomic
from experiments.provenance import run_info
from hybridsd.data import default_data_dir, load_mt_bench

REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = REPO / "hybridsd" / "models" / "tiny-coder"
SMOKE_DIR = Path("/tmp/tiny-coder-tokenizer-smoke")

# Top-level packages of the repositories that code_edits_dev.jsonl was mined from: never trained on
# (also when vendored, e.g. pip/_vendor/rich, setuptools/_vendor/more_itertools).
EXCLUDED_PACKAGES = frozenset({
    "click", "flask", "jinja2", "jinja", "werkzeug", "requests", "rich", "typer", "more_itertools", "marshmallow",
})

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
START_HEADER, END_HEADER, EOT, PAD = "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|pad|>"
SPECIAL_TOKENS = (BOS, EOS, START_HEADER, END_HEADER, EOT, PAD)  # ids 0..5, in this order

# Llama-3's split pattern: letters, up to 3 digits, punctuation runs, newlines, whitespace runs.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Llama-3-like template. Unlike Llama-3's, message contents are not trimmed: code must come through as is.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TokenizerConfig:
    """What the tokenizer is trained on and how big it is."""

    vocab_size: int = 10240          # special tokens included; a multiple of 64
    min_frequency: int = 2
    seed: int = 0
    max_total_chars: int = 40_000_000
    max_file_chars: int = 100_000    # larger files (mostly generated tables) are skipped
    min_file_chars: int = 200
    max_metadata_chars: int = 4_000_000


def is_excluded(rel_parts: tuple[str, ...]) -> bool:
    """True for a path (relative to a source root) inside an evaluation repository's package, or a cache."""
    dashed = {p.replace("_", "-") for p in EXCLUDED_PACKAGES}
    for part in rel_parts:
        name = part.lower()
        if name in EXCLUDED_PACKAGES or name == "__pycache__":
            return True
        if name.endswith(".dist-info") and name.split("-")[0].replace("_", "-") in dashed:
            return True
        if name.endswith(".py") and name[:-3] in EXCLUDED_PACKAGES:
            return True
    return False


def source_roots() -> list[Path]:
    """This interpreter's stdlib and site-packages folders (deduplicated, sorted)."""
    paths = sysconfig.get_paths()
    roots = {Path(paths[k]).resolve() for k in ("stdlib", "purelib", "platlib") if paths.get(k)}
    try:
        import site
        roots.update(Path(p).resolve() for p in site.getsitepackages())
    except AttributeError:  # virtualenvs of old layouts
        pass
    return sorted(r for r in roots if r.is_dir())


def python_files(roots: list[Path], pattern: str = "*.py") -> list[Path]:
    """All files matching ``pattern`` under the roots, without the evaluation packages, sorted.

    The stdlib root contains site-packages: a file is attributed to the deepest root holding it, so it is
    listed once and excluded by its path relative to that root.
    """
    found: set[Path] = set()
    for root in roots:
        for path in root.rglob(pattern):
            owner = max((r for r in roots if path.is_relative_to(r)), key=lambda r: len(r.parts))
            if not is_excluded(path.relative_to(owner).parts) and path.is_file():
                found.add(path)
    return sorted(found)


def read_text(path: Path) -> str | None:
    """The file as UTF-8 text, or None if it is not valid UTF-8 or holds NUL bytes."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return None if "\0" in text else text


def sample_texts(files: list[Path], cfg: TokenizerConfig, max_chars: int) -> list[str]:
    """Texts of a seeded shuffle of ``files``, with the size filters, until ``max_chars`` are gathered."""
    order = list(files)
    random.Random(cfg.seed).shuffle(order)
    texts, total = [], 0
    for path in order:
        text = read_text(path)
        if text is None or not cfg.min_file_chars <= len(text) <= cfg.max_file_chars:
            continue
        texts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return texts


def mt_bench_texts(path: Path) -> list[str]:
    """The MT-Bench questions (both turns) and reference answers; ``ValueError`` naming the file (and line, or
    question) when it is not MT-Bench's rows (:func:`hybridsd.data.load_mt_bench`) with every turn and reference a
    string."""
    texts = []
    for q in load_mt_bench(path):
        refs = q.meta.get("reference", [])
        if not isinstance(refs, list) or not all(isinstance(t, str) for t in [*q.meta["turns"], *refs]):
            raise ValueError(f"{path} question {q.id}: its turns and references must be lists of strings")
        texts.extend([*q.meta["turns"], *refs])
    return texts


def build_tokenizer(texts: list[str], cfg: TokenizerConfig):
    """Train the BPE model and wrap it as a ``PreTrainedTokenizerFast`` with template and special tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())  # no unk token: byte-level covers every byte
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                                      special_tokens=[(BOS, bos_id)]),
    ])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[START_HEADER, END_HEADER, EOT],
        chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False, model_max_length=4096,
    )


def check_tokenizer(tokenizer, samples: list[str]) -> dict:
    """Assert exact round trips and the BOS behaviour; return chars-per-token on the samples."""
    n_chars = n_tokens = 0
    for text in samples:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text, "round trip failed"
        n_chars, n_tokens = n_chars + len(text), n_tokens + len(ids)
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    bos = tokenizer.bos_token_id
    assert tokenizer.encode(chat, add_special_tokens=False).count(bos) == 1
    assert tokenizer.encode(chat, add_special_tokens=True).count(bos) == 2
    return {"chars_per_token": round(n_chars / max(n_tokens, 1), 3), "checked_texts": len(samples)}


def install(staged: Path, out: Path, last: str) -> None:
    """Move every file of the folder ``staged`` into ``out``, each synced and then renamed over its namesake,
    ``last`` after the others; then remove ``staged``."""
    for path in sorted(staged.iterdir(), key=lambda p: (p.name == last, p.name)):
        with path.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(path, out / path.name)
    staged.rmdir()


def main(argv: list[str] | None = None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"folder to write into (default: {MODEL_DIR}; with --smoke {SMOKE_DIR})")
    parser.add_argument("--smoke", action="store_true", help="tiny corpus and vocabulary")
    parser.add_argument("--mt-bench", type=Path, default=None,
                        help="the MT-Bench questions (JSON lines; default: mt_bench.jsonl of $HYBRIDSD_DATA)")
    args = parser.parse_args(argv)
    cfg = TokenizerConfig()
    out = args.out or (SMOKE_DIR if args.smoke else MODEL_DIR)
    if args.smoke:
        cfg = TokenizerConfig(vocab_size=1024, max_total_chars=1_000_000, max_metadata_chars=100_000)
    parser.check_output(out, folder=True)
    try:
        mt_bench = args.mt_bench or default_data_dir() / "mt_bench.jsonl"
    except FileNotFoundError as e:
        parser.error(f"--mt-bench not given and {e}")
    if not mt_bench.is_file():
        parser.error(f"--mt-bench: no file {mt_bench} (part of the training text)")
    try:
        questions = mt_bench_texts(mt_bench)
    except ValueError as e:
        parser.error(f"--mt-bench: {e}")
    staged = out / ".tokenizer.partial"
    if staged.exists():  # what a killed run left
        shutil.rmtree(staged)
    start = time.time()
    roots = source_roots()
    files = python_files(roots)
    metadata = python_files(roots, "METADATA")
    code = sample_texts(files, cfg, cfg.max_total_chars)
    english = sample_texts(metadata, cfg, cfg.max_metadata_chars) + questions
    texts = code + english
    print(f"{len(files)} .py files found, {len(code)} used ({sum(map(len, code)) / 1e6:.1f} MB); "
          f"{len(english)} English texts ({sum(map(len, english)) / 1e6:.1f} MB)", flush=True)
    tokenizer = build_tokenizer(texts, cfg)
    rng = random.Random(cfg.seed + 1)
    stats = check_tokenizer(tokenizer, rng.sample(code, min(200, len(code))) + questions[:20])
    tokenizer.save_pretrained(staged)
    info = {"config": asdict(cfg), "roots": [str(r) for r in roots], "mt_bench": str(mt_bench),
            "python": sys.version.split()[0], "code_files": len(code), "code_chars": sum(map(len, code)),
            "english_texts": len(english), "english_chars": sum(map(len, english)),
            "excluded_packages": sorted(EXCLUDED_PACKAGES), "vocab_size": len(tokenizer),
            "wall_s": round(time.time() - start, 1), **stats, "run_info": run_info("cpu")}
    write_atomic(staged / "tokenizer_training.json", json.dumps(info, indent=2) + "\n")
    install(staged, out, last="tokenizer_training.json")
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
