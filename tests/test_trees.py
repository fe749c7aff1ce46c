"""Draft trees: structure, one-pass verification against slow references, lossless generation, sampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import OracleDrafter, hf_greedy, interpreter_env, prompts, tiny_target
from hybridsd.drafters.base import Draft, Drafter, ProposeRequest
from hybridsd.drafters.eagle_tree import EagleTreeDrafter
from hybridsd.drafters.hybrid import HybridDrafter
from hybridsd.drafters.ngram import NgramDrafter
from hybridsd.drafters.tree import DraftTree, layout, paths_to_parents
from hybridsd.eagle.model import EagleHead
from hybridsd.generate import generate
from hybridsd.verify import verify_tree
from test_verify import _chi2_ok

SMALL_V = 9  # a small vocabulary: random heads' top-k children get accepted often
N_NEW = 24


def _random_parents(rng, n: int) -> tuple[int, ...]:
    return tuple(int(rng.integers(-1, i)) for i in range(n))


def _judge(tree: DraftTree, logits: torch.Tensor, temp: float = 0.0, g=None) -> tuple[int, int]:
    res = verify_tree(tree.tokens, tree.parents, torch.as_tensor(tree.ancestors), torch.as_tensor(tree.depths),
                      tree.probs, tree.sampled, logits, temp, g)
    return int(res[0]), int(res[1])


# ---- structure -------------------------------------------------------------------


def test_join_merges_shared_deterministic_prefixes():
    a = Draft(torch.tensor([5, 6, 7]), "ngram")
    b = Draft(torch.tensor([5, 6, 8, 9]), "eagle")
    q = torch.full((2, 10), 0.1)
    c = Draft(torch.tensor([5, 3]), "sampled", q)
    tree = DraftTree.join([a, b, c])
    assert tree.tokens.tolist() == [5, 6, 7, 8, 9, 5, 3]
    assert tree.parents == (-1, 0, 1, 1, 3, -1, 5)
    assert tree.sources == ("ngram",) * 3 + ("eagle",) * 2 + ("sampled",) * 2
    assert tree.sampled == (False,) * 5 + (True,) * 2  # sampled nodes are never merged
    assert torch.equal(tree.probs[5:], q) and tree.probs[:5].sum() == 0
    assert DraftTree.join([]) is None and DraftTree.join([Draft(torch.tensor([], dtype=torch.long), "x")]) is None
    assert DraftTree.join([a]).is_chain()
    assert tree.path(4) == [0, 1, 3, 4] and tree.reach(-1) == 4 and tree.reach(2) == 3 and tree.reach(3) == 4


def test_clip_keeps_shallow_nodes():
    tree = DraftTree(torch.arange(6), (-1, 0, 1, -1, 3, 4), ("a",) * 6)
    c = tree.clip(2)
    assert c.tokens.tolist() == [0, 1, 3, 4] and c.parents == (-1, 0, -1, 2)
    assert tree.clip(3) is tree and tree.clip(0) is None


@pytest.mark.parametrize("n", [1, 2, 7, 16, 33])
def test_chain_structure_equals_the_level_walk(n):
    """A chain's depths and ancestors (its shortcut) are what structure() computes for any tree."""
    from hybridsd.drafters.tree import structure

    chain = DraftTree.chain(Draft(torch.arange(n), "ngram"))
    depths, ancestors = structure(chain.parents)
    assert chain.depths.dtype == depths.dtype and chain.ancestors.dtype == ancestors.dtype
    assert np.array_equal(chain.depths, depths) and np.array_equal(chain.ancestors, ancestors)
    assert chain.reach(-1) == n and chain.reach(n // 2) == n and \
        chain.clip(n // 2 + 1).parents == chain.parents[: n // 2 + 1]


@pytest.mark.parametrize("seed", range(5))
def test_layout_matches_reference(seed):
    rng = np.random.default_rng(seed)
    parents = _random_parents(rng, int(rng.integers(1, 12)))
    positions, visible = layout(parents, 7)
    for i, p in enumerate(parents):
        chain = []
        while p >= 0:
            chain.append(p)
            p = parents[p]
        assert positions[1 + i] == 7 + 1 + len(chain)
        assert set(np.flatnonzero(visible[1 + i])) == {0, 1 + i} | {1 + a for a in chain}
    assert positions[0] == 7 and visible[0].tolist() == [True] + [False] * len(parents)


def test_static_tree_paths():
    order, parents, ranks = paths_to_parents([(1,), (0, 0), (0,), (0, 1), (0, 0, 0)])
    assert order == [(0,), (1,), (0, 0), (0, 1), (0, 0, 0)]
    assert parents == [-1, -1, 0, 0, 2] and ranks == [0, 1, 0, 1, 0]
    for bad in ([], [(0, 0)], [(0,), (0,)], [(-1,)], [()]):
        with pytest.raises(ValueError):
            paths_to_parents(bad)


BAD_PATHS = [  # (case, paths): not a list of tuples of ranks
    ("ints", [0, 1]),
    ("a string", "ab"),
    ("an int", 5),
    ("None among tuples", [(0,), None]),
    ("a string among tuples", [(0,), "a"]),
]


@pytest.mark.parametrize("case,paths", BAD_PATHS, ids=[c[0] for c in BAD_PATHS])
def test_static_tree_paths_of_the_wrong_form(case, paths):
    """One TypeError naming ``paths`` and its form, not "'int' object is not iterable"."""
    head = EagleHead.from_target(tiny_target("llama", vocab=SMALL_V), kind="eagle1")
    for build in (lambda: paths_to_parents(paths), lambda: EagleTreeDrafter(head, paths=paths)):
        with pytest.raises(TypeError, match=r"paths must be a list of paths, each a tuple of child ranks"):
            build()
    assert EagleTreeDrafter(head, paths=iter([(0,), [1], (0, 0)])).max_tokens == 3  # any iterables of ranks


def test_draft_tree_tokens_must_be_a_tensor():
    with pytest.raises(TypeError, match="DraftTree.tokens must be a tensor of token ids, got list"):
        DraftTree([1, 2], (-1, 0), ("a", "a"))


def test_bad_trees_are_rejected():
    with pytest.raises(ValueError, match="parents"):
        DraftTree(torch.tensor([1, 2]), (-1, 1), ("a", "a"))
    with pytest.raises(ValueError, match="probs"):
        DraftTree(torch.tensor([1]), (-1,), ("a",), None, (True,))
    head = EagleHead.from_target(tiny_target("llama", vocab=SMALL_V), kind="eagle1")
    with pytest.raises(ValueError, match="nodes"):
        EagleTreeDrafter(head, depth=2, top_k=2, nodes=7)
    with pytest.raises(ValueError, match="top_k"):
        EagleTreeDrafter(head, depth=2, top_k=0)
    with pytest.raises(TypeError, match="parents must be node indices"):
        DraftTree(torch.tensor([1, 2]), (-1, 0.5), ("a", "a"))  # else a TypeError deep in path() mid-generation
    with pytest.raises(ValueError, match=f"rank {SMALL_V}.*vocabulary has only {SMALL_V}"):
        EagleTreeDrafter(head, paths=[(0,), (SMALL_V,)])  # else topk fails mid-generation
    EagleTreeDrafter(head, paths=[(0,), (SMALL_V - 1,)])
    with pytest.raises(TypeError, match="depth must be an int"):
        EagleTreeDrafter(head, depth=2.0)
    d = EagleTreeDrafter(head, depth=np.int64(2), top_k=np.int32(2), nodes=np.int64(4))  # numpy ints, as everywhere
    assert (d.depth, d.top_k, d.nodes) == (2, 2, 4) and type(d.depth) is int


def test_tree_parents_are_normalized():
    tree = DraftTree(torch.tensor([1, 2, 3]), [-1, np.int64(0), 1], ("a",) * 3)
    assert tree.parents == (-1, 0, 1) and all(type(p) is int for p in tree.parents) and tree.is_chain()


# ---- verification ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_greedy_tree_matches_reference(seed):
    """The deepest node whose whole path equals the target's argmax at each parent (first on ties)."""
    rng = np.random.default_rng(seed)
    n, v = int(rng.integers(1, 14)), 3
    parents = _random_parents(rng, n)
    tokens = rng.integers(0, v, size=n)
    logits = torch.as_tensor(rng.normal(size=(n + 1, v)), dtype=torch.float32)
    tree = DraftTree(torch.as_tensor(tokens), parents, ("a",) * n)
    argmax = logits.argmax(-1).tolist()
    best, best_depth = -1, 0
    for i in range(n):
        path = tree.path(i)
        if all(tokens[j] == argmax[parents[j] + 1] for j in path) and len(path) > best_depth:
            best, best_depth = i, len(path)
    assert _judge(tree, logits) == (best, argmax[best + 1])


def test_tree_sampling_is_distributed_as_target():
    """A two-level tree of deterministic and sampled siblings: the first two tokens ~ p(t1) p(t2 | t1)."""
    v, temp, runs = 4, 1.0, 3000
    g = torch.Generator().manual_seed(0)
    l0 = torch.randn(v, generator=g) * 1.5  # root
    l1 = torch.randn(v, v, generator=g) * 1.5  # after t1
    q = torch.softmax(torch.randn(v, generator=g), -1)  # the sampled nodes' proposal
    p0, p1 = torch.softmax(l0 / temp, -1), torch.softmax(l1 / temp, -1)
    parents = (-1, -1, -1, 0, 0, 1, 2)
    sampled = (False, True, True, False, True, False, True)
    counts = np.zeros((v, v))
    for _ in range(runs):
        toks = torch.multinomial(q, len(parents), replacement=True, generator=g)  # sampled nodes' draws
        toks[0], toks[3], toks[5] = int(p0.argmax()), 1, 0  # deterministic nodes: the likeliest first
        tree = DraftTree(toks, parents, ("t",) * len(parents), q.expand(len(parents), v).clone(), sampled)
        rows = torch.stack([l0] + [l1[int(toks[i])] for i in range(len(parents))])  # each node's next-token logits
        rows[4], rows[5], rows[6] = 0, 0, 0  # depth-2 rows: any logits will do, the test reads two tokens
        node, nxt = _judge(tree, rows, temp, g)
        path = [int(toks[i]) for i in tree.path(node)] + [nxt]
        if len(path) < 2:  # the next step would draw t2 from p(. | t1)
            path.append(int(torch.multinomial(p1[path[0]], 1, generator=g)))
        counts[path[0], path[1]] += 1
    assert _chi2_ok(counts.ravel(), (p0[:, None] * p1).ravel().numpy())


def _sequential_tree_sampling(tokens, parents, probs, sampled, logits, temp, g) -> tuple[int, int]:
    """Recursive rejection sampling node by node (the slow reference), drawing as verify_tree does."""
    p = torch.softmax(logits / temp, dim=-1)
    u = torch.rand(len(parents), generator=g)
    cur, resid = -1, p[0]
    for i, par in enumerate(parents):
        if par != cur:
            continue
        q = probs[i] if sampled[i] else torch.nn.functional.one_hot(tokens[i], p.shape[-1]).to(p.dtype)
        if u[i] * q[tokens[i]] < resid[tokens[i]]:
            cur, resid = i, p[i + 1]
            continue
        rest = (resid - q).clamp_min(0)
        mass = rest.sum(-1, keepdim=True)
        resid = torch.where(mass > 0, rest / mass.clamp_min(1e-30), resid)
    return cur, int(torch.multinomial(resid, 1, generator=g)[0])


@pytest.mark.parametrize("share", [0.4, 0.0])  # some sampled nodes; none (the closed form)
@pytest.mark.parametrize("seed", range(20))
def test_tree_sampling_matches_node_by_node_reference(seed, share):
    """Sibling ranks judged at once (or in closed form) give the node-by-node walk's result on the same draws."""
    rng = np.random.default_rng(seed)
    n, v = int(rng.integers(1, 16)), int(rng.integers(2, 6))
    parents = _random_parents(rng, n)
    tokens = torch.as_tensor(rng.integers(0, v, size=n))  # duplicate siblings included
    sampled = tuple(bool(x) for x in rng.random(n) < share)
    probs = torch.softmax(torch.as_tensor(rng.normal(size=(n, v)) * 2, dtype=torch.float32), -1)
    logits = torch.as_tensor(rng.normal(size=(n + 1, v)) * 2, dtype=torch.float32)
    tree = DraftTree(tokens, parents, ("a",) * n, probs, sampled)
    for draw in range(20):
        want = _sequential_tree_sampling(tokens, parents, probs, sampled, logits, 0.8,
                                         torch.Generator().manual_seed(draw))
        assert _judge(tree, logits, 0.8, torch.Generator().manual_seed(draw)) == want


# ---- generation --------------------------------------------------------------------


class RandomTreeDrafter(Drafter):
    """Random trees around the known continuation: per node a few children, the right token among them
    with probability ``hit``; at temperature > 0 some children are sampled from a random proposal."""

    name = "random-tree"

    def __init__(self, reference: list[int], vocab: int, nodes: int = 12, hit: float = 0.7, seed: int = 0):
        self.reference, self.vocab, self.nodes, self.hit = reference, vocab, nodes, hit
        self.rng = np.random.default_rng(seed)
        self.prompt_len = 0

    @property
    def max_tokens(self) -> int:
        return self.nodes

    def reset(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len

    def propose(self, request: ProposeRequest) -> DraftTree:
        pos = len(request.tokens) - self.prompt_len
        rng = self.rng
        parents, tokens, sampled, rows = [], [], [], []
        frontier = [(-1, 0)]  # (node, depth)
        while frontier and len(parents) < self.nodes:
            node, d = frontier.pop(0)
            want = self.reference[pos + d] if pos + d < len(self.reference) else 0
            for c in range(int(rng.integers(1, 4))):
                if len(parents) == self.nodes:
                    break
                is_sampled = request.temperature > 0 and rng.random() < 0.5
                q = torch.softmax(torch.as_tensor(rng.normal(size=self.vocab) * 2, dtype=torch.float32), -1)
                if is_sampled:
                    tok = int(torch.multinomial(q, 1, generator=request.generator))
                else:
                    tok = want if c == 0 and rng.random() < self.hit else int(rng.integers(self.vocab))
                parents.append(node)
                tokens.append(tok)
                sampled.append(is_sampled)
                rows.append(q)
                frontier.append((len(parents) - 1, d + 1))
        probs = torch.stack(rows) if any(sampled) else None
        return DraftTree(torch.tensor(tokens, device=request.device), tuple(parents), (self.name,) * len(parents),
                         probs, tuple(sampled))


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def small_target(request):
    return tiny_target(request.param, vocab=SMALL_V, seed=3, initializer_range=0.2)


def _tree_drafters(model, ref: list[int]) -> dict[str, Drafter]:
    heads = {kind: EagleHead.from_target(model, kind=kind) for kind in ("eagle1", "eagle3")}
    out = {"random": RandomTreeDrafter(ref, SMALL_V, nodes=20)}  # > 16 rows: padded under graphs
    for kind, head in heads.items():
        out[f"{kind}-dynamic"] = EagleTreeDrafter(head, depth=4, top_k=3, nodes=14 if kind == "eagle1" else 24)
        out[f"{kind}-static"] = EagleTreeDrafter(head, paths=[(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
        out[f"{kind}-hybrid"] = HybridDrafter(NgramDrafter(k=4, min_n=1, max_n=3),
                                              EagleTreeDrafter(head, depth=3, top_k=3, nodes=9), "tree")
    out["oracle-hybrid"] = HybridDrafter(OracleDrafter(ref, 3, err=0.3, vocab=SMALL_V),
                                         RandomTreeDrafter(ref, SMALL_V, nodes=8, hit=0.5, seed=1), "tree")
    return out


def test_greedy_trees_are_lossless(small_target):
    accepted, sources = {}, {}
    for ids in prompts(3, vocab=SMALL_V, seed=4):
        ref = hf_greedy(small_target, ids, N_NEW)
        for name, drafter in _tree_drafters(small_target, ref).items():
            res = generate(small_target, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[])
            assert res.tokens == ref, name
            res.stats.check()
            accepted[name] = accepted.get(name, 0) + res.stats.num_accepted
            sources.setdefault(name, set()).update(src for src, n in res.stats.accepted_by_drafter.items() if n)
    assert all(a > 0 for a in accepted.values()), accepted  # every tree got tokens accepted, deep ones too
    hybrids = {name: {"ngram", name.split("-")[0]} for name in accepted if name.endswith("-hybrid")}
    hybrids["oracle-hybrid"] = {"oracle", "random-tree"}
    assert all(sources[name] == want for name, want in hybrids.items()), sources  # both branches of each hybrid


def test_tree_stats_name_the_winning_branch(small_target):
    ids = prompts(2, vocab=SMALL_V, seed=4)[1]
    ref = hf_greedy(small_target, ids, N_NEW)
    head = EagleHead.from_target(small_target, kind="eagle3")
    drafter = HybridDrafter(NgramDrafter(k=4, min_n=1, max_n=3), EagleTreeDrafter(head, 3, 3, 9), "tree")
    res = generate(small_target, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[])
    assert res.tokens == ref
    s = res.stats
    s.check()
    for step in s.trace:
        assert step.tree_tokens >= step.drafted >= step.accepted
        assert (step.source is None) == (step.accepted == 0)
    assert s.num_tree_tokens == sum(step.tree_tokens for step in s.trace)
    assert set(s.steps_won_by) == {"ngram", "eagle3"}  # each branch wins some steps


def test_tree_generation_samples_like_plain():
    """End to end at temperature 1: the first two tokens have plain sampling's distribution."""
    from test_sampling import _exact

    v, runs = 6, 400
    model = tiny_target("llama", vocab=v, seed=11, initializer_range=0.3)
    ids = torch.tensor([3, 4, 5, 3, 4, 5, 3, 4])
    exact = _exact(model, ids, 2)
    keys = sorted(exact)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys))
    head = EagleHead.from_target(model, kind="eagle1")
    for seed in range(runs):  # random trees of sampled and deterministic nodes, and EAGLE-2 trees
        drafter = (RandomTreeDrafter([], v, nodes=6, hit=0.0, seed=seed) if seed % 2 else
                   EagleTreeDrafter(head, depth=2, top_k=2, nodes=5))
        res = generate(model, ids, drafter=drafter, max_new_tokens=3, temperature=1.0, seed=seed, eos_token_id=[])
        counts[index[tuple(res.tokens[:2])]] += 1
    assert _chi2_ok(counts, np.array([exact[k] for k in keys]))


# ---- analytic ----------------------------------------------------------------------


def _tree_and_probs(rng, n: int):
    """Random parents and exclusive per-node acceptance probabilities (each node's children sum to <= 1)."""
    parents = _random_parents(rng, n)
    a = rng.random(n)
    for p in set(parents):
        kids = [i for i in range(n) if parents[i] == p]
        a[kids] *= rng.random() / a[kids].sum()
    return parents, a


def _expected_by_enumeration(parents, a, node=-1) -> float:
    """Expected accepted tokens below ``node``: each child, exclusively, with its probability."""
    return sum(a[c] * (1 + _expected_by_enumeration(parents, a, c)) for c in range(len(parents)) if parents[c] == node)


@pytest.mark.parametrize("seed", range(20))
def test_tree_al_matches_enumeration(seed):
    from hybridsd.analytic import chain_al, tree_al

    rng = np.random.default_rng(seed)
    parents, a = _tree_and_probs(rng, int(rng.integers(1, 15)))
    assert tree_al(parents, a) == pytest.approx(1 + _expected_by_enumeration(parents, a))
    assert tree_al(range(-1, 4), [0.7] * 5) == pytest.approx(chain_al(0.7, 5))


def test_tree_al_sequential_matches_monte_carlo():
    """Siblings tried in turn, each passing w.p. accept[i]: Monte Carlo of the walk down the tree."""
    from hybridsd.analytic import tree_al

    rng = np.random.default_rng(0)
    parents = (-1, -1, -1, 0, 0, 1, 3, 3, 6)
    r = rng.random(len(parents))
    runs, total = 20000, 0
    for _ in range(runs):
        node, n = -1, 0
        while True:
            kids = [i for i in range(len(parents)) if parents[i] == node]
            node = next((c for c in kids if rng.random() < r[c]), None)
            if node is None:
                break
            n += 1
        total += n
    assert tree_al(parents, r, sequential=True) == pytest.approx(1 + total / runs, abs=0.03)
    with pytest.raises(ValueError, match="sum"):
        tree_al((-1, -1), [0.7, 0.7])
    with pytest.raises(ValueError, match="accept"):
        tree_al((-1,), [0.5, 0.5])


# ---- padding and the GPU -----------------------------------------------------------


def test_padded_tree_block_leaves_real_rows_unchanged():
    from hybridsd.generate import _pad_block
    from hybridsd.target import Target

    model = tiny_target("llama", vocab=SMALL_V)
    target = Target(model, 128)
    ids = torch.tensor(prompts(1, vocab=SMALL_V)[0].tolist() + [3, 4, 5])
    start = ids.numel()
    target.forward(ids, 0)
    tree = DraftTree(torch.tensor([1, 2, 3, 4, 5]), (-1, 0, -1, 2, 2), ("a",) * 5)
    feed = torch.cat([torch.tensor([6]), tree.tokens])
    positions, visible = tree.layout(start)
    want, _ = target.forward(feed, start, positions=positions, visible=visible)
    feed, positions, visible = _pad_block(feed, positions, visible, start)
    assert feed.shape[0] % 16 == 0 and visible.shape == (16, 16)
    got, _ = target.forward(feed, start, positions=positions, visible=visible)
    torch.testing.assert_close(got[:6], want)


def _certain_head(model) -> EagleHead:
    """An EAGLE-3 head whose every step puts probability 1 (log-probability exactly 0) on draft token 0 and
    ranks the rest by index: each node's first child ties it, and siblings tie across the frontier."""
    head = EagleHead.from_target(model, kind="eagle3")
    v = head.config.out_vocab_size
    row = -torch.arange(v, dtype=torch.float32)
    row[0] = 100.0  # exp(-100 - ...) vanishes beside 1: softmax gives exactly 1

    def logits(out):  # [..., h] -> [..., V]
        return row.expand(*out.shape[:-1], v)

    head.logits = logits
    return head


@pytest.mark.parametrize("depth,top_k,nodes", [(4, 3, 3), (4, 2, 3), (6, 3, 5), (6, 3, 8), (3, 3, 7), (5, 2, 9)])
def test_dynamic_tree_keeps_parents_of_tied_children(depth, top_k, nodes):
    """Scores that tie exactly (a child of probability 1, siblings at the cut) still give ``nodes`` nodes, each
    with its parent kept, the certain chain first."""
    model = tiny_target("llama", vocab=SMALL_V, seed=3)
    d = EagleTreeDrafter(_certain_head(model), depth=depth, top_k=top_k, nodes=nodes)
    d.reset(10)
    d.observe(torch.randn(10, d.head.config.feature_size), torch.randint(0, SMALL_V, (10,)))
    tree = d.propose(ProposeRequest(np.zeros(1, dtype=np.int64), depth, torch.device("cpu")))
    assert len(tree) == nodes  # no node was dropped for a missing parent
    assert tree.depths.max() == min(depth, nodes)  # the nodes of score 0 first: the certain token at every depth


def test_tied_dynamic_trees_are_lossless(small_target):
    ids = prompts(2, vocab=SMALL_V, seed=4)[0]
    ref = hf_greedy(small_target, ids, N_NEW)
    d = EagleTreeDrafter(_certain_head(small_target), depth=4, top_k=3, nodes=5)
    res = generate(small_target, ids, drafter=d, max_new_tokens=N_NEW, eos_token_id=[])
    assert res.tokens == ref
    res.stats.check()
    assert [step.tree_tokens for step in res.stats.trace[:10]] == [5] * 10  # full trees, far from the end
    assert res.stats.num_accepted > 0  # the certain chain is right sometimes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_trees_are_lossless_with_cuda_graphs():
    """Dynamic (graphed), static and hybrid trees under the target's CUDA graphs (padded tree blocks), fp32."""
    compile = False
    model = tiny_target("llama", vocab=SMALL_V, seed=3, initializer_range=0.2).cuda()
    accepted = {}
    for ids in prompts(3, vocab=SMALL_V, seed=4):
        ids = ids.cuda()
        plain = generate(model, ids, max_new_tokens=N_NEW, eos_token_id=[], cuda_graphs=True, compile=compile)
        for name, drafter in _tree_drafters(model, plain.tokens).items():
            res = generate(model, ids, drafter=drafter, max_new_tokens=N_NEW, eos_token_id=[], cuda_graphs=True,
                           compile=compile)
            assert res.tokens == plain.tokens, name
            res.stats.check()
            accepted[name] = accepted.get(name, 0) + res.stats.num_accepted
    assert all(a > 0 for a in accepted.values()), accepted  # every tree got tokens accepted


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_graphed_eagle2_tree_equals_eager():
    model = tiny_target("llama", vocab=SMALL_V, seed=3).cuda()
    head = EagleHead.from_target(model, kind="eagle3")
    trees = []
    for graphs in (True, False):
        d = EagleTreeDrafter(head, depth=4, top_k=3, nodes=12, cuda_graphs=graphs)
        d.reset(10)
        g = torch.Generator(device="cuda").manual_seed(0)
        out = []
        for m in (10, 3, 1, 2):  # prefill, then steps with m committed pairs each
            d.observe(torch.randn(m, head.config.feature_size, device="cuda", generator=g),
                      torch.randint(0, SMALL_V, (m,), device="cuda", generator=g))
            t = d.propose(ProposeRequest(np.zeros(1, dtype=np.int64), 8, torch.device("cuda")))
            out.append((t.tokens.tolist(), t.parents))
        trees.append(out)
    assert trees[0] == trees[1]


def test_split_kernel_serves_tree_blocks_in_the_triton_interpreter():
    """A tree block of more query rows than one split-KV program holds (row tiles) against SDPA, fp32."""
    pytest.importorskip("triton")
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, torch
        from hybridsd.attention import SPLIT_ROW_TILE, grouped_attention, split_kv_attention
        from hybridsd.drafters.tree import layout
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        for hkv, g, t, start, d in ((2, 4, 37, 150, 16), (1, 3, 30, 70, 32)):
            parents = [int(rng.integers(-1, i)) for i in range(t - 1)]
            _, vis = layout(parents, start)
            allowed = torch.zeros(t, start + t + 5, dtype=torch.bool)
            allowed[:, :start] = True
            allowed[:, start:start + t] = torch.as_tensor(vis)
            q = torch.randn(hkv, g * t, d)
            k, v = torch.randn(hkv, allowed.shape[1], d), torch.randn(hkv, allowed.shape[1], d)
            assert g * t > SPLIT_ROW_TILE
            got = split_kv_attention(q, k, v, allowed, d ** -0.5)
            ref = grouped_attention(q, k, v, allowed, d ** -0.5)
            assert (got - ref).abs().max().item() < 1e-5, (got - ref).abs().max().item()
    """)
    env = interpreter_env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


def test_head_attention_of_one_sequence_equals_sdpa_with_gqa():
    """A tree-masked head step (batch 1, a [T, S] bool mask: the grouped kernel) equals SDPA's GQA path."""
    from hybridsd.kv_cache import StaticKVCache

    model = tiny_target("llama", vocab=SMALL_V, seed=5)
    head = EagleHead.from_target(model, kind="eagle3")
    assert head.config.num_attention_heads != head.config.num_key_value_heads
    cfg, F = head.config, head.config.feature_size
    g = torch.Generator().manual_seed(0)
    outs = []
    for broadcast in (False, True):  # a [1, 1, T, S] mask takes SDPA's path
        cache = StaticKVCache(1, cfg.num_key_value_heads, cfg.head_dim, 64)
        head(torch.randn(1, 20, F, generator=torch.Generator().manual_seed(1)), torch.arange(20)[None] % SMALL_V,
             torch.arange(20), cache)
        parents = (-1, -1, 0, 0, 2, 1, -1)
        _, vis = layout(parents, 20)
        mask = torch.zeros(7, 40, dtype=torch.bool)
        mask[:, :20] = True
        mask[:, 20:27] = torch.as_tensor(vis[1:, 1:])
        feats = torch.randn(1, 7, cfg.hidden_size, generator=g.manual_seed(2))
        out = head(feats, torch.arange(7)[None] % SMALL_V, torch.as_tensor(20 + layout(parents, 0)[0][1:]), cache,
                   slots=torch.arange(20, 27), attn_mask=mask[None, None] if broadcast else mask, kv_len=40)
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_graphed_cache_move_equals_copies():
    """StaticKVCache.move on CUDA (a graph per slot count, replayed) equals the copies made on the CPU."""
    from hybridsd.kv_cache import StaticKVCache

    caches = [StaticKVCache(3, 2, 8, 64, device=dev) for dev in ("cpu", "cuda")]
    for layer in range(3):
        for c in caches:
            c.keys[layer].copy_(torch.arange(c.keys[layer].numel()).view_as(c.keys[layer]))
            c.values[layer].copy_(-torch.arange(c.keys[layer].numel()).view_as(c.keys[layer]))
    for src, dst in (([11, 13, 14], [10, 11, 12]), ([20, 22, 25], [19, 20, 21]), ([5], [3]), ([40, 44], [38, 39])):
        for c in caches:
            dev = c.keys[0].device
            c.move(torch.tensor(src, device=dev), torch.tensor(dst, device=dev))
    for a, b in zip((*caches[0].keys, *caches[0].values), (*caches[1].keys, *caches[1].values)):
        assert torch.equal(a, b.cpu())


def test_compiled_tree_levels_trace_whole_and_equal_eager(monkeypatch):
    """A dynamic tree with ``compile``: the level step traces as one graph (no break) and builds the same tree
    (traced by the aot_eager backend here; inductor's kernels run on the GPU)."""
    compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda f, **kw: compile(f, backend="aot_eager", fullgraph=True,
                                                                  dynamic=kw.get("dynamic")))
    model = tiny_target("llama", vocab=SMALL_V, seed=3)
    head = EagleHead.from_target(model, kind="eagle3")
    trees = []
    for c in (False, True):
        d = EagleTreeDrafter(head, depth=4, top_k=3, nodes=12, compile=c)
        d.reset(10)
        g = torch.Generator().manual_seed(0)
        for m in (10, 3):
            d.observe(torch.randn(m, head.config.feature_size, generator=g),
                      torch.randint(0, SMALL_V, (m,), generator=g))
            t = d.propose(ProposeRequest(np.zeros(1, dtype=np.int64), 8, torch.device("cpu")))
            trees.append((t.tokens.tolist(), t.parents))
    assert trees[:2] == trees[2:]
    with pytest.raises(ValueError, match="compile"):
        EagleTreeDrafter(head, compile="reduce-overhead")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_kernel_tree_block_on_cuda(dtype):
    """The 8B shape's 64-row tree block (256 query rows per KV head: row tiles) by the split kernel against SDPA."""
    from hybridsd.attention import grouped_attention

    torch.manual_seed(0)
    hkv, g, t, start, d = 8, 4, 64, 2000, 128
    parents = _random_parents(np.random.default_rng(0), t - 1)
    _, vis = layout(parents, start)
    allowed = torch.zeros(t, 2304, dtype=torch.bool, device="cuda")
    allowed[:, :start] = True
    allowed[:, start:start + t] = torch.as_tensor(vis, device="cuda")
    q = torch.randn(hkv, g * t, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(hkv, 2304, d, device="cuda", dtype=dtype) for _ in range(2))
    got = grouped_attention(q, k, v, allowed, d ** -0.5, "split").float()
    ref = grouped_attention(q.float(), k.float(), v.float(), allowed, d ** -0.5, "sdpa")
    assert (got - ref).abs().max().item() < (1e-4 if dtype == torch.float32 else 2e-2)
