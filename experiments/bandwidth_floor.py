"""The memory-bandwidth floor of the speed benchmarks' Llama-3.1-8B-shaped target, batch 1, bf16.

A step's floor is the bytes it must read over the device-to-device copy bandwidth measured in the same run:
every weight matrix (the layers' and the LM head; not the input embedding table, of which a step gathers one row
per token) and the keys and values of the ``ctx`` cached tokens in every layer. The matrices' floor leaves the KV
reads out: it bounds the matmul kernels alone. Both are computed from what a results file records
(``weight_GB``: the bytes of all its parameters; ``copy_bandwidth_TBps``; the layer count), so every file is read
with the same definition; a file's stored ``floor_ms``, where it has one, is all the parameters' bytes over the
bandwidth (embedding table counted, KV reads not) and is not used. No torch here."""

from __future__ import annotations

# the benchmark target's shape (experiments.speed_steps.llama8b builds it with a chosen number of layers)
LLAMA8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
               vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False)
BYTES = 2  # bf16 weights and KV cache


def layer_params(hidden: int = LLAMA8B["hidden_size"], inter: int = LLAMA8B["intermediate_size"],
                 heads: int = LLAMA8B["num_attention_heads"], kv_heads: int = LLAMA8B["num_key_value_heads"]) -> int:
    """Parameters of one decoder layer: q, k, v, o, gate, up and down projections and two RMS norms."""
    kv = hidden // heads * kv_heads
    return 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inter + 2 * hidden


def weight_bytes(layers: int) -> int:
    """All parameters' bytes of the target with ``layers`` layers: embedding, layers, final norm, LM head."""
    h, v = LLAMA8B["hidden_size"], LLAMA8B["vocab_size"]
    return BYTES * (layers * layer_params() + 2 * v * h + h)


def embedding_bytes() -> int:
    """Bytes of the input embedding table (a step reads one row of it per token)."""
    return BYTES * LLAMA8B["vocab_size"] * LLAMA8B["hidden_size"]


def kv_bytes(layers: int, ctx: int) -> int:
    """Bytes of the keys and values of ``ctx`` cached tokens over ``layers`` layers."""
    head_dim = LLAMA8B["hidden_size"] // LLAMA8B["num_attention_heads"]
    return BYTES * layers * 2 * ctx * LLAMA8B["num_key_value_heads"] * head_dim


def layers_of(doc: dict) -> int:
    """The layer count of a results file (``layers``, else ``args.layers``), checked against its ``weight_GB``:
    a file of another shape is refused rather than given a wrong floor."""
    layers = doc.get("layers", (doc.get("args") or {}).get("layers"))
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"the results file names no layer count (layers: {layers!r})")
    if abs(doc["weight_GB"] * 1e9 - weight_bytes(layers)) > 1e3:
        raise ValueError(f"weight_GB {doc['weight_GB']} is not the {layers}-layer Llama-3.1-8B shape's "
                         f"{weight_bytes(layers) / 1e9}: no floor for this file")
    return layers


def matrices_floor_ms(doc: dict) -> float:
    """The weight matrices' bytes (all parameters but the input embedding) over the file's copy bandwidth, in ms."""
    layers_of(doc)
    return (doc["weight_GB"] * 1e9 - embedding_bytes()) / (doc["copy_bandwidth_TBps"] * 1e12) * 1e3


def step_floor_ms(doc: dict, ctx: int) -> float:
    """A step's floor at context ``ctx``: the weight matrices' and the ``ctx`` tokens' KV bytes over the file's copy
    bandwidth, in ms."""
    return matrices_floor_ms(doc) + kv_bytes(layers_of(doc), ctx) / (doc["copy_bandwidth_TBps"] * 1e12) * 1e3


def floors_ms(doc: dict) -> dict[int, float]:
    """The step floor at each context the file holds."""
    return {int(c): step_floor_ms(doc, int(c)) for c in doc.get("contexts") or {}}
