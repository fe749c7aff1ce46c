"""The split-KV attention kernel under Triton's CPU interpreter (fp32, fp16) against SDPA.

bf16 is checked on the GPU (``tests/test_cuda.py``): the interpreter's bf16 ``tl.dot`` is wrong.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from conftest import compile_sm90, run_interpreted
from hybridsd.attention import SPLIT_PROGRAMS, SPLIT_ROW_TILE, SPLIT_WIDE_TILE, grouped_attention, split_plan

CASES = [  # (kv heads, group, block tokens, keys, head dim)
    (2, 2, 1, 7, 16), (3, 4, 9, 300, 24), (1, 1, 3, 64, 128), (2, 4, 5, 200, 32), (8, 4, 1, 700, 64),
    (1, 4, 40, 150, 16), (2, 3, 50, 90, 16),  # 160 rows in three tiles of 64; 150 in two of 128 (the default)
]


@pytest.mark.parametrize("programs,row_tile", [(SPLIT_PROGRAMS, None), (512, 64), (7, 128), (128, 5)])
@pytest.mark.parametrize("rows,keys,heads,d", [(4, 2560, 8, 128), (36, 768, 8, 128), (1, 1, 1, 16),
                                               (7, 4097, 3, 80), (128, 100, 32, 256), (256, 2560, 8, 128)])
def test_split_plan_covers_every_key_once(rows, keys, heads, d, programs, row_tile):
    block_r, block_n, chunk, splits = split_plan(rows, keys, heads, d, programs, row_tile)
    if row_tile is None:  # the default: 64-row tiles, 128-row ones for blocks of more rows
        row_tile = SPLIT_ROW_TILE if rows <= SPLIT_ROW_TILE else SPLIT_WIDE_TILE
        assert block_r == (max(16, _pow2_at_least(rows)) if rows <= SPLIT_ROW_TILE else SPLIT_WIDE_TILE)
    assert block_r >= min(max(16, row_tile), _pow2_at_least(max(16, rows)))
    assert block_r <= max(16, _pow2_at_least(row_tile))
    assert block_r & (block_r - 1) == 0
    assert chunk % block_n == 0
    assert (splits - 1) * chunk < keys <= splits * chunk  # no empty program, no key left out
    groups = heads * -(-rows // block_r)  # programs per key chunk: KV heads x row tiles
    assert groups * splits <= max(programs, groups)


def _pow2_at_least(n: int) -> int:
    return 1 << (n - 1).bit_length()


def test_split_plan_rejects_no_programs():
    with pytest.raises(ValueError, match="programs"):
        split_plan(4, 100, 8, 128, 0)
    with pytest.raises(ValueError, match="row_tile"):
        split_plan(4, 100, 8, 128, 128, 0)


@pytest.mark.parametrize("dtype, row_tile, want", [(torch.float32, None, SPLIT_ROW_TILE),
                                                   (torch.bfloat16, None, None), (torch.float32, 128, 128)])
def test_wide_row_tiles_only_for_two_byte_inputs(monkeypatch, dtype, row_tile, want):
    """The row tile a block of 256 rows is planned with: 2-byte inputs take the default (wide) plan, fp32
    inputs 64-row tiles unless a tile is asked for."""
    import hybridsd.attention as attention

    seen = []

    def plan(rows, keys, kv_heads, head_dim, programs, tile):
        seen.append(tile)
        raise LookupError("planned")  # stop before the kernel

    monkeypatch.setattr(attention, "split_plan", plan)
    q, k, v = (torch.zeros(2, 256, 16, dtype=dtype), torch.zeros(2, 80, 16, dtype=dtype),
               torch.zeros(2, 80, 16, dtype=dtype))
    with pytest.raises(LookupError, match="planned"):
        attention.split_kv_attention(q, k, v, torch.ones(64, 80, dtype=torch.bool), 0.25, row_tile=row_tile)
    assert seen == [want]


# Scripts run under Triton's CPU interpreter (TRITON_INTERPRET=1 is read when triton is imported, so not here)
SPLIT_KERNEL = textwrap.dedent(f"""
    import torch
    from hybridsd.attention import grouped_attention, split_kv_attention
    torch.manual_seed(0)
    worst = {{}}
    for hkv, g, t, s, d in {CASES!r}:
        for dtype in (torch.float32, torch.float16):
            q = torch.randn(hkv, g * t, d, dtype=dtype)
            k, v = torch.randn(hkv, s, d, dtype=dtype), torch.randn(hkv, s, d, dtype=dtype)
            allowed = torch.rand(t, s) < 0.3
            allowed[:, 0] = True
            allowed[-1, 1:] = False  # a row that sees one key; chunks it never sees
            got = split_kv_attention(q, k, v, allowed, d ** -0.5, programs=7 if s > 100 else 128,
                                     row_tile=64 if t == 40 else None).float()
            ref = grouped_attention(q.float(), k.float(), v.float(), allowed, d ** -0.5)
            key = str(dtype)
            worst[key] = max(worst.get(key, 0.0), (got - ref).abs().max().item())
    print(worst)
    assert worst["torch.float32"] < 1e-5 and worst["torch.float16"] < 2e-3, worst
""")

ATTENTION_PLANS = textwrap.dedent("""
    import transformers as tf
    from experiments.speed_diagnostics import attention_plans
    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2)
    cases = ("decode", "tree_q64", "exact16_two_views", "exact16_decode_in_place")
    rows = attention_plans(tf.LlamaForCausalLM(cfg), 20, plans=((3, 64), (3, 128), (3, 16)), cases=cases, iters=1)
    # 128-row tiles only where a block has more than 64 query rows (the 64-node tree: 128); exact mode's 16-row ones
    want = [(c, 3, t) for c in cases for t in (64, 128, 16) if t != 128 or c == "tree_q64"]
    assert [(r["case"], r["programs"], r["row_tile"]) for r in rows] == want
    assert min(r["ms_per_step"] for r in rows) > 0
    print("ok")
""")


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    """Each script above run under the interpreter (``conftest.run_interpreted``): name -> None or its traceback."""
    return run_interpreted({"SPLIT_KERNEL": SPLIT_KERNEL, "ATTENTION_PLANS": ATTENTION_PLANS})


def test_split_kernel_in_the_triton_interpreter(interpreted):
    assert interpreted["SPLIT_KERNEL"] is None, interpreted["SPLIT_KERNEL"][-3000:]


def test_sdpa_kernel_equals_per_head_reference():
    torch.manual_seed(1)
    hkv, g, t, s, d = 2, 3, 4, 19, 8
    q = torch.randn(hkv, g * t, d)
    k, v = torch.randn(hkv, s, d), torch.randn(hkv, s, d)
    allowed = torch.rand(t, s) < 0.5
    allowed[:, 3] = True
    got = grouped_attention(q, k, v, allowed, 0.3)
    assert got.shape == (t, hkv * g * d)
    for h in range(hkv):
        for j in range(g):
            for i in range(t):
                row = j * t + i
                w = torch.softmax((q[h, row] @ k[h].T * 0.3).masked_fill(~allowed[i], float("-inf")), -1)
                col = (h * g + j) * d  # token-major output, query heads in order
                torch.testing.assert_close(got[i, col : col + d], w @ v[h], atol=1e-6, rtol=1e-5)


def test_attention_plans_in_the_triton_interpreter(interpreted):
    """The benchmark's attention timing (``speed_diagnostics.attention_plans``) runs a plain, a tree, an in-place and a
    two-view exact case at each grid aim (every case's kernel path is checked against SDPA elsewhere)."""
    assert interpreted["ATTENTION_PLANS"] is None, interpreted["ATTENTION_PLANS"][-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("programs,row_tile", [(SPLIT_PROGRAMS, None), (SPLIT_PROGRAMS, 64), (512, 64), (256, 128)])
def test_cuda_split_kernel_tree_block_plans(dtype, programs, row_tile):
    """A 64-token tree block on the 8B shape (256 query rows per KV head: row tiles of 64, or of 128 with 8
    warps) against SDPA, for several grid aims."""
    from hybridsd.attention import split_kv_attention

    if dtype == torch.float32 and row_tile == 128:
        pytest.skip("fp32 tiles of 128 rows at head dim 128 need more shared memory than an SM has")
    from hybridsd.drafters.tree import layout

    torch.manual_seed(0)
    hkv, g, d, t, start, s = 8, 4, 128, 64, 2000, 2560
    rng = np.random.default_rng(0)
    _, vis = layout([int(rng.integers(-1, i)) for i in range(t - 1)], start)
    allowed = torch.zeros(t, s, dtype=torch.bool, device="cuda")
    allowed[:, :start] = True
    allowed[:, start : start + t] = torch.as_tensor(vis, device="cuda")
    q = torch.randn(hkv, g * t, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(hkv, s, d, device="cuda", dtype=dtype) for _ in range(2))
    got = split_kv_attention(q, k, v, allowed, d**-0.5, programs=programs, row_tile=row_tile)
    ref = grouped_attention(q.float(), k.float(), v.float(), allowed, d**-0.5, "sdpa")
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("elem, ieee", [("bf16", False), ("fp32", True)])
@pytest.mark.parametrize("nb, exact, rope", [(0, False, False), (0, True, True), (2, True, False), (2, True, True)])
def test_value_products_accumulate_alike_on_every_path(elem, ieee, nb, exact, rope):
    """Compiled for an H100/H200 (sm_90, no GPU needed), every value-product dot of the split kernel takes the
    running output as its accumulator, on the in-place and the gathering paths alike, with the queries rotated in the
    kernel or not: a path where the compiler folds ``acc + dot`` into the dot and one where it cannot round
    differently, so a row's bits would depend on how its key tile was read."""
    import re

    from hybridsd.attention_kernels import split_kv_kernel as fn

    pointers = dict(Q=f"*{elem}", K=f"*{elem}", V=f"*{elem}", MASK="*i1", KSLOT="*i64", BRANCH="*i64", BLOCK="*i64",
                    COS=f"*{elem}", SIN=f"*{elem}", PART="*fp32", STATS="*fp32")
    consts = dict(SCALE=0.125, BLOCK_R=16, BLOCK_N=64, D=128, D_PAD=128, IEEE=ieee, NB=nb, G=4, EXACT=exact,
                  ROPE=rope)
    ttir = compile_sm90(fn, pointers, consts, stage="ttir")
    dots = re.findall(r"tt\.dot (%[\w.]+), (%[\w.]+), (%[\w.]+).*-> tensor<16x(\d+)xf32>", ttir)
    values = [acc for _, _, acc, cols in dots if int(cols) == consts["D_PAD"]]  # [16, 64] x [64, D]; scores: [16, 64]
    assert len(values) >= (3 if nb else 1), dots  # exact mode: the in-place loops and the gathering loop
    assert not any(acc.startswith("%cst") for acc in values), values


@pytest.mark.parametrize("exact", [False, "views", "in-place"])
def test_split_grid_aims_at_its_mode_programs(monkeypatch, exact):
    """The split kernel's launch grid: ``SPLIT_PROGRAMS`` for the plain path, one program per ``EXACT_CHUNK`` keys
    and row tile in exact mode (whatever the span: the chunks are its partials), with key views or without (checked
    on the launch itself, the kernels replaced by recorders: no Triton needed)."""
    import hybridsd.attention as A

    grids, consts = [], []

    class Launch:
        def __getitem__(self, grid):
            grids.append(grid)
            return lambda *args, **kwargs: consts.append(kwargs)

    monkeypatch.setattr(A, "_kernel", lambda: Launch())
    monkeypatch.setattr(A, "_merge_kernel", lambda: Launch())
    h, g, t, s, d = 8, 4, 16, 2560, 128
    q, k, v = torch.zeros(h, g * t, d), torch.zeros(h, s, d), torch.zeros(h, s, d)
    allowed = torch.ones(t, s, dtype=torch.bool)
    extra = {"views": {"key_slots": torch.arange(s).repeat(2, 1), "branch": torch.zeros(t, dtype=torch.long)},
             "in-place": {"block": torch.tensor([0, 0, t])}, False: {}}[exact]
    A.split_kv_attention(q, k, v, allowed, d**-0.5, **extra)
    tile = A.EXACT_ROW_TILE if exact else g * t
    if exact:
        splits = -(-s // A.EXACT_CHUNK)
    else:
        _, _, _, splits = split_plan(tile, s, h, d, SPLIT_PROGRAMS, tile)
        assert h * splits <= SPLIT_PROGRAMS
    assert grids[0] == (h, splits, -(-g * t // max(16, tile)))
    assert consts[0]["EXACT"] == bool(exact) and consts[0]["NB"] == (2 if exact == "views" else 0)
    assert consts[1]["EXACT"] == bool(exact)  # the merge: padding rows zeroed in exact mode
