"""The zoo target's training data (``train_zoo.py``): pretraining rows packed from Python sources; edit-tuning
examples made from (before, request, after) triples, with the answer positions where the edit shows, where the
answer leaves or resumes the copy, and the copies to avoid; their length-bucketed batches; and the edit data of a
training call, built in a worker pool and kept in a cache folder keyed by what it depends on.

An example is ``(token ids, prompt length, changed answer positions, decision positions, avoided copies[, ignored
answer positions])`` (:func:`sft_examples`, :func:`with_repeated_line`); ``cfg`` is a
:class:`experiments.train_zoo.TargetConfig`.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from experiments.distributed import write_atomic
from experiments.edit_corpus import blazedit_messages, change_request, pretraining_texts, real_request
from experiments.identifier_renaming import renamed
from experiments.sequence_match import changed_spans
from experiments.synthetic_edits import synthetic_edit

RENAMED_NAMES_SHARE = 0.5  # in a renamed example, each name its file defines gets a new one with this probability

REPO = Path(__file__).resolve().parents[1]


def pack(token_lists: list[list[int]], seq_len: int, bos: int, eos: int) -> np.ndarray:
    """Documents as ``BOS doc EOS`` concatenated and cut into rows of ``seq_len + 1`` tokens (last partial dropped).


    Consecutive rows share one token, so every token is a target exactly once.
    """
    flat = np.concatenate([np.array([bos, *ids, eos], dtype=np.int32) for ids in token_lists])
    n = (len(flat) - 1) // seq_len
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return flat[idx]


def copy_candidates(ids: list[int], positions: list[int], n: int = 3) -> list[int]:
    """For each index ``q`` of ``positions`` (sorted, each >= n), the token that followed the latest earlier
    occurrence of ``ids[q-n:q]`` in ``ids[:q-1]`` (what copying that occurrence would predict at ``q``), or -1."""
    last: dict[tuple, int] = {}  # n-gram -> index just after its latest occurrence seen so far
    out, want = [], iter(positions)
    q = next(want, None)
    for t in range(n, len(ids) + 1):
        key = tuple(ids[t - n:t])
        if t == q:
            out.append(ids[last[key]] if key in last else -1)
            q = next(want, None)
        last[key] = t
    return out


def ambiguous_copies(ids: list[int], n_prompt: int, n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """(answer positions, wrong tokens): where the answer (``ids[n_prompt:]``) copies the prompt at a place whose
    ``n`` tokens before it occur in the prompt followed by two or more different tokens (its own among them), so
    that copying the wrong occurrence would skip or repeat a stretch; the wrong token is the most frequent other
    continuation (the smallest id among equals). Positions count from the answer's first token."""
    ids = np.asarray(ids, dtype=np.int64)  # (L,)
    none = np.zeros(0, dtype=np.int64)
    if n_prompt <= n or len(ids) <= n_prompt:
        return none, none
    bits, vocab = max(1, int(ids.max()).bit_length()), int(ids.max()) + 1
    if bits * n > 63:
        raise ValueError(f"{n} tokens of {bits} bits do not fit one int64 key; use a smaller n")
    keys = np.zeros(len(ids) - n + 1, dtype=np.int64)  # (L-n+1,) keys[i]: the n-gram ids[i:i+n]
    for i in range(n):
        keys = (keys << bits) | ids[i:len(ids) - n + 1 + i]
    grams, gram_of = np.unique(keys[:n_prompt - n], return_inverse=True)  # the prompt's n-grams followed by a token
    pairs, counts = np.unique(gram_of * vocab + ids[n:n_prompt], return_counts=True)  # (n-gram index, next token)
    branching = np.bincount(pairs // vocab, minlength=len(grams)) >= 2  # (G,) n-grams with >= 2 continuations
    t = np.arange(n_prompt, len(ids))  # (A,) answer positions in ids
    at = np.minimum(np.searchsorted(grams, keys[t - n]), len(grams) - 1)  # (A,) the n tokens before each ...
    own = at * vocab + ids[t]
    hit = (grams[at] == keys[t - n]) & branching[at] & np.isin(own, pairs)  # ... ambiguous, their token a copy
    options: dict[int, list[tuple[int, int]]] = {}  # n-gram index -> (-count, token), most frequent first
    for pair, count in zip(pairs.tolist(), counts.tolist()):
        if branching[pair // vocab]:
            options.setdefault(pair // vocab, []).append((-count, pair % vocab))
    for o in options.values():
        o.sort()
    wrong = [next(tok for _, tok in options[g] if tok != x) for g, x in zip(at[hit].tolist(), ids[t[hit]].tolist())]
    return t[hit] - n_prompt, np.asarray(wrong, dtype=np.int64)


def edit_positions(args: tuple[list[int], list[int], list[int]]) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """(changed, decisions, copy): positions in ``after`` (token ids; ``len(after)`` is the end-of-turn token)
    where an edit of ``before`` shows (every inserted or replacing token, and the token right after a deletion)
    and where a copy of ``before`` must be left or resumed (the first token of every change and the first token
    after it), from one token alignment; ``copy``: (position, token) at each changed position inside ``after``,
    the token being what copying the latest earlier occurrence of the three tokens before it in
    ``prompt + after`` predicts (:func:`copy_candidates`, -1 for none) (pool worker)."""
    prompt, before, after = args
    changed: set[int] = set()
    decisions: set[int] = set()
    for j1, j2 in changed_spans(before, after):  # difflib's opcodes, compiled
        changed.update(range(j1, j2) if j2 > j1 else [j1])
        decisions.update((j1, j2))
    inside = sorted(j for j in changed if j < len(after))
    copy = copy_candidates(prompt + after, [len(prompt) + j for j in inside])
    return sorted(changed), sorted(decisions), list(zip(inside, copy))


def sft_examples(tokenizer, triples: list[tuple[str, str, str]], eot: int,
                 workers: int = 1) -> list[tuple[list[int], int, list[int], list[int], list[tuple[int, int]]]]:
    """(token ids, prompt length, changed answer positions, decision positions, avoided copies) per (before,
    instruction, after): the templated prompt (one BOS), then the answer ``after<|eot_id|>``; the positions (see
    :func:`edit_positions`, the end-of-turn token included in both) are
    where the answer departs from a copy of ``before`` and where it leaves or resumes the copy; the avoided
    copies are (changed position, token) where copying an earlier occurrence would not give the answer.


    The template is rendered once around a marker (it copies message contents verbatim) and the texts are
    tokenized in parallel batches; the first example is checked against ``apply_chat_template``.
    """
    marker = "\x00MARKER\x00"
    head, tail = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                               add_generation_prompt=True).split(marker)
    prompts = [head + blazedit_messages(b, i)[0]["content"] + tail for b, i, _ in triples]
    if triples:
        assert prompts[0] == tokenizer.apply_chat_template(blazedit_messages(*triples[0][:2]), tokenize=False,
                                                           add_generation_prompt=True)
    fast = tokenizer.backend_tokenizer
    p_ids = [e.ids for e in fast.encode_batch(prompts, add_special_tokens=False)]
    a_ids = [e.ids for e in fast.encode_batch([a for _, _, a in triples], add_special_tokens=False)]
    if triples:
        assert p_ids[0] == tokenizer.encode(prompts[0], add_special_tokens=False)
    befores = list(dict.fromkeys(b for b, _, _ in triples))  # synthetic edits share their files: each once
    b_of = dict(zip(befores, (e.ids for e in fast.encode_batch(befores, add_special_tokens=False))))
    b_ids = [b_of[b] for b, _, _ in triples]  # shared lists, read only
    pairs = list(zip(p_ids, b_ids, a_ids))
    changed_spans([0], [0])  # compiled (or loaded) once here, before the workers fork
    if workers > 1:
        with Pool(workers) as pool:
            both = pool.map(edit_positions, pairs, chunksize=32)
    else:
        both = [edit_positions(x) for x in pairs]
    return [(p + a + [eot], len(p), c + [len(a)], sorted(set(d) | {len(a)}),
             [(j, t) for j, t in copy if t >= 0 and t != a[j]])
            for p, a, (c, d, copy) in zip(p_ids, a_ids, both)]


def with_repeated_line(example: tuple, newline_ids: set[int], rng: random.Random,
                       max_repeats: int = 2) -> tuple | None:
    """``example`` (a :func:`sft_examples` row) with one answer line repeated 1 to ``max_repeats`` times right
    after itself in the input, the repeated tokens' targets ignored (a sixth element: those answer positions):
    the target after the repeats is the answer's true next token, a decision position, and copying the repeat
    again is an avoided copy, so the model learns to leave a loop it has entered. A line of a change is taken
    when there is one (3+ tokens, ending in a token that holds a newline); None when there is no such line."""
    ids, n_prompt, changed, decisions, avoided = example[:5]
    answer = ids[n_prompt:-1]
    ends = [j + 1 for j, t in enumerate(answer) if t in newline_ids]  # line boundaries (index after a newline)
    lines = [(k, j) for k, j in zip([0] + ends, ends) if j - k >= 3]
    if not lines:
        return None
    inside = set(changed)
    new_lines = [(k, j) for k, j in lines if any(t in inside for t in range(k, j))]
    k, j = rng.choice(new_lines or lines)
    dup = answer[k:j] * rng.randint(1, max_repeats)
    d = len(dup)


    def shift(positions):
        return [q + d if q >= j else q for q in positions]


    exit_copy = [(j + d, answer[k])] if j < len(answer) and answer[k] != answer[j] else []
    return (ids[:n_prompt + j] + dup + ids[n_prompt + j:], n_prompt, shift(changed),
            sorted(set(shift(decisions)) | {j + d}),
            [(q + d if q >= j else q, t) for q, t in avoided if q != j] + exit_copy, list(range(j, j + d)))


def padded_width(length: int) -> int:
    """A batch's width for its longest row of ``length`` tokens: the next multiple of 64."""
    return -(-length // 64) * 64


def sft_batch_rows(examples: list[tuple], batch_tokens: int, seed: int) -> list[list[int]]:
    """The example indices of each batch of :func:`sft_batches`: sorted by length (ties in a seeded random order),
    cut where a batch padded to a multiple of 64 tokens would exceed ``batch_tokens``, the batches shuffled."""
    rng = random.Random(seed)
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i][0]), rng.random()))
    batches, cur = [], []
    for i in order:
        width = padded_width(len(examples[i][0]))
        if cur and width * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def sft_batches(examples: list[tuple], batch_tokens: int, pad: int,
                seed: int, change_weight: float = 1.0, decision_weight: float = 1.0, ambiguity_weight: float = 0.0):
    """Length-bucketed, right-padded batches (:func:`sft_batch_rows`) of (inputs, targets, weights, avoid, copy)
    from :func:`sft_examples`' rows; targets -100 outside the answers, weights 1 on answer tokens, ``change_weight``
    on the changed positions and ``decision_weight`` on the decision positions (the larger of the two where both
    apply), none on ignored positions (a row's optional sixth element, see :func:`with_repeated_line`); avoid: the
    avoided copy's token where there is one, else -100; copy: True at the answer positions that are neither changed
    nor decisions nor ignored (where the answer copies its input). With ``ambiguity_weight`` > 0, the ambiguous
    copies (:func:`ambiguous_copies`) weigh at least that much and avoid their wrong continuation where nothing else
    is avoided."""
    import torch


    for batch in sft_batch_rows(examples, batch_tokens, seed):
        width = padded_width(max(len(examples[i][0]) for i in batch))
        inputs = np.full((len(batch), width), pad, dtype=np.int64)
        targets = np.full((len(batch), width), -100, dtype=np.int64)
        weights = np.zeros((len(batch), width), dtype=np.float32)
        avoid = np.full((len(batch), width), -100, dtype=np.int64)
        copy = np.zeros((len(batch), width), dtype=bool)
        for row, i in enumerate(batch):  # numpy per row: the host builds a batch in a few ms
            ids, n_prompt, changed, decisions, avoided = examples[i][:5]
            ids = np.asarray(ids, dtype=np.int64)
            start, end = n_prompt - 1, len(ids) - 1  # the answer's positions (each predicts the next token)
            inputs[row, :end] = ids[:-1]
            targets[row, start:end] = ids[n_prompt:]
            w = weights[row]  # (width,) a view
            w[start:end] = 1.0
            copy[row, start:end] = True
            copy[row, np.asarray(changed, dtype=np.int64) + start] = False
            at = np.asarray(decisions, dtype=np.int64) + start
            copy[row, at] = False
            w[np.asarray(changed, dtype=np.int64) + start] = change_weight
            w[at] = np.maximum(w[at], np.float32(decision_weight))
            if ambiguity_weight > 0:
                where, token = ambiguous_copies(ids, n_prompt)
                w[where + start] = np.maximum(w[where + start], np.float32(ambiguity_weight))
                avoid[row, where + start] = token  # the avoided copies below take precedence
            if avoided:
                where, token = zip(*avoided)
                avoid[row, np.asarray(where, dtype=np.int64) + start] = token
            if len(examples[i]) > 5 and examples[i][5]:
                at = np.asarray(examples[i][5], dtype=np.int64) + start
                targets[row, at], w[at], avoid[row, at], copy[row, at] = -100, 0.0, -100, False
        yield tuple(torch.from_numpy(t) for t in (inputs, targets, weights, avoid, copy))


def with_replay(batches, replay, every: int):
    """``batches`` with one batch of ``replay`` (an (inputs, targets) iterator; weights of 1 added, nothing
    avoided, no copy positions) in every ``every`` steps, at positions every-1, 2*every-1, ..."""
    import torch


    for i, batch in enumerate(batches):
        yield batch
        if i % (every - 1) == every - 2:
            x, y = next(replay)
            yield x, y, torch.ones(y.shape), None, None


def pretraining_data(cfg, tokenizer, special: dict) -> tuple[dict, list[str]]:
    """The pretraining rows (``val_seqs``, ``train_seqs``; None without a pretraining corpus) and their ``stats``,
    and the candidate files for synthetic edits (:func:`edit_corpus.pretraining_texts`)."""
    t0 = time.time()
    pre_texts, edit_sources, stats = pretraining_texts(cfg)
    stats["reading_s"] = round(time.time() - t0, 1)
    val_seqs = train_seqs = None
    if pre_texts:
        pre_ids = [e.ids for e in tokenizer.backend_tokenizer.encode_batch(pre_texts, add_special_tokens=False)]
        seqs = pack(pre_ids, cfg.pretrain_seq_len, special["bos"], special["eos"])
        perm = np.random.default_rng(cfg.seed).permutation(len(seqs))
        val_seqs, train_seqs = seqs[perm[: cfg.val_sequences]], seqs[perm[cfg.val_sequences:]]
        stats.update(pretrain_tokens=int(sum(len(x) + 2 for x in pre_ids)), pretrain_sequences=len(train_seqs),
                     val_sequences=len(val_seqs))
    return {"val_seqs": val_seqs, "train_seqs": train_seqs, "stats": stats}, edit_sources


def eval_examples_of(cfg, tokenizer, special: dict, eval_rows: list[dict]) -> list[tuple]:
    """:func:`sft_examples` of about 64 evaluation edits spread over ``eval_rows`` (the evaluation losses)."""
    rows = eval_rows[:: max(1, len(eval_rows) // 64)]
    return sft_examples(tokenizer, [(r["before"], real_request((r, cfg.change_request, cfg.max_places)), r["after"])
                                    for r in rows], special["eot"])


def renamed_by_chance(texts: tuple[str, ...], seed: int, share: float) -> tuple[str, ...]:
    """``texts`` (a file first) with the file's own names renamed (:mod:`experiments.identifier_renaming`, each
    with probability ``RENAMED_NAMES_SHARE``) with probability ``share``, drawn from ``seed``; unchanged at 0."""
    if share > 0:
        rng = random.Random(seed)
        if rng.random() < share:
            return renamed(texts, rng, RENAMED_NAMES_SHARE)
    return texts


def renamed_synthetic_edit(args: tuple) -> dict | None:
    """``synthetic_edit(job)`` of the job's file renamed by chance (pool worker; ``args``: (job, rename share);
    :func:`renamed_by_chance`)."""
    job, share = args
    return synthetic_edit((job[0], *renamed_by_chance((job[1],), job[0] * 7 + 1, share), *job[2:]))


def renamed_real_row(args: tuple[dict, str, int, float, int]) -> tuple[str, str, str]:
    """(before, change request, after) of a code_edits row renamed by chance (pool worker; ``args``: (row, request
    mode, max places, rename share, seed); :func:`renamed_by_chance` of before, after and subject)."""
    row, mode, max_places, share, seed = args
    before, after, subject = renamed_by_chance((row["before"], row["after"], row["instruction"]), seed, share)
    return before, change_request(before, after, subject, mode, max_places), after


def edit_data(cfg, tokenizer, special: dict, train_rows: list[dict], edit_sources: list[str]) -> dict:
    """The edit-tuning examples (``cfg.real_epochs`` copies of the real training edits with their requests, then
    ``cfg.synthetic_examples`` synthetic edits of ``edit_sources``; before the repeated lines and the length cut),
    ``n_real`` (the real ones' count), each synthetic edit's (kinds, char edit norm), the first real request, and
    the (before, request, after) rows when the target call repairs loops (``sft_rows``). With ``cfg.rename_share``
    that share of the real and synthetic edits have their file's own names renamed (the same real edits in every
    epoch). The synthetic edits of a smaller ``synthetic_examples`` are a prefix of a larger one's."""
    with Pool(cfg.workers) as pool:  # the workers use no tokenizer (forked after its threads may have started)
        n_src = len(edit_sources)
        jobs = [((cfg.seed * 1_000_003 + i, edit_sources[i % n_src], edit_sources[(7919 * i + 1) % n_src],
                  cfg.change_request, cfg.max_places, cfg.span_share), cfg.rename_share)
                for i in range(int(1.25 * cfg.synthetic_examples))]
        synth = [s for s in pool.map(renamed_synthetic_edit, jobs, chunksize=64) if s][: cfg.synthetic_examples]
        real = pool.map(renamed_real_row, [(r, cfg.change_request, cfg.max_places, cfg.rename_share,
                                            cfg.seed * 1_000_003 + 10_000_000 + i) for i, r in enumerate(train_rows)],
                        chunksize=16)
    requests = [q for _, q, _ in real]
    sft_rows = real * cfg.real_epochs
    n_real = len(sft_rows)
    sft_rows += [(s["before"], s["instruction"], s["after"]) for s in synth]
    return {"examples": sft_examples(tokenizer, sft_rows, special["eot"], cfg.workers), "n_real": n_real,
            "synthetic": [(s["kinds"], s["char_edit_norm"]) for s in synth],
            "example_real_request": requests[0] if requests else None,
            **({"sft_rows": sft_rows} if cfg.repair_time_s > 0 else {})}


def edit_key(cfg, tok_dir: Path, train_rows: list[dict], edit_sources: list[str]) -> str:
    """A digest of what :func:`edit_data` depends on but ``synthetic_examples``: the edit settings of ``cfg``, the
    source files that make the data, the tokenizer's files, the edit rows and the synthetic edits' source files."""
    fields = ("seed", "span_share", "real_epochs", "change_request", "max_places", "repair_time_s", "rename_share")
    h = hashlib.sha256(json.dumps({f: getattr(cfg, f) for f in fields}, sort_keys=True).encode())
    for rel in DATA_SOURCES:
        h.update((REPO / rel).read_bytes())
    for path in sorted(Path(tok_dir).glob("tokenizer*.json")) + sorted(Path(tok_dir).glob("*.jinja")):
        h.update(path.name.encode() + path.read_bytes())
    h.update(json.dumps(train_rows, sort_keys=True).encode())
    for text in edit_sources:
        h.update(hashlib.sha256(text.encode()).digest())
    return h.hexdigest()


# The source files that make edit_data's result (part of edit_key).
DATA_SOURCES = ("experiments/zoo_data.py", "experiments/edit_corpus.py", "experiments/synthetic_edits.py",
                "experiments/sequence_match.py", "experiments/identifier_renaming.py", "hybridsd/edit_requests.py",
                "hybridsd/edit_distance.py")


def cached_edit_data(cache: Path | None, cfg, key: str, build) -> dict:
    """``build()``; with ``cache`` (a folder), the result kept there under ``key`` by an earlier call with at least
    ``cfg.synthetic_examples`` synthetic edits, cut to that many (else built and kept, atomically); its
    ``data_cache`` says which."""
    import pickle


    if cache is None:
        return {**build(), "data_cache": None}
    path = Path(cache) / f"edit_data_{key[:32]}.pkl"
    if path.is_file():
        with path.open("rb") as f:
            data = pickle.load(f)  # our own file, written below by this function
        n = cfg.synthetic_examples
        if len(data["synthetic"]) >= n:
            cut = data["n_real"] + n
            return {**data, "examples": data["examples"][:cut], "synthetic": data["synthetic"][:n],
                    **({"sft_rows": data["sft_rows"][:cut]} if "sft_rows" in data else {}),
                    "data_cache": f"hit {path.name} ({len(data['synthetic'])} synthetic edits)"}
    data = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, pickle.dumps(data, protocol=5))
    return {**data, "data_cache": f"written {path.name}"}
