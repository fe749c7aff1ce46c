"""The memory-bandwidth floor: the benchmark target's bytes against the model transformers builds, and the floor of
a recorded run."""

import json
from pathlib import Path

import pytest
import torch

from experiments import bandwidth_floor as bf

RECORD = Path(__file__).parents[1] / "experiments/results/speed/steps_auto.json"


@pytest.mark.parametrize("layers", [1, 3])
def test_weight_and_embedding_bytes_are_the_models(layers):
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=layers, **bf.LLAMA8B))
    assert bf.weight_bytes(layers) == sum(p.numel() * 2 for p in model.parameters())
    assert bf.embedding_bytes() == model.model.embed_tokens.weight.numel() * 2
    cfg = model.config
    assert bf.kv_bytes(layers, 100) == layers * 2 * 100 * cfg.num_key_value_heads * cfg.head_dim * 2


def test_floor_of_a_recorded_run():
    doc = json.loads(RECORD.read_text())
    assert (doc["weight_GB"], doc["layers"]) == (16.060522496, 32)
    bw = doc["copy_bandwidth_TBps"] * 1e12
    # 16.06 GB of weights, 1.05 GB of them the input embedding; 0.268 GB of KV at 2048 tokens, 0.067 GB at 512
    assert bf.matrices_floor_ms(doc) == pytest.approx((16.060522496e9 - 1.050673152e9) / bw * 1e3)
    assert bf.step_floor_ms(doc, 2048) == pytest.approx((16.060522496e9 - 1.050673152e9 + 0.268435456e9) / bw * 1e3)
    assert bf.floors_ms(doc) == {2048: bf.step_floor_ms(doc, 2048), 512: bf.step_floor_ms(doc, 512)}
    assert bf.step_floor_ms(doc, 512) < bf.step_floor_ms(doc, 2048) < doc["floor_ms"]  # its stored floor: all weights


@pytest.mark.parametrize("doc, match", [
    ({"weight_GB": 16.0, "copy_bandwidth_TBps": 4.0, "layers": 32}, "weight_GB 16.0 is not"),
    ({"weight_GB": 16.060522496, "copy_bandwidth_TBps": 4.0}, "no layer count"),
    ({"weight_GB": 16.060522496, "copy_bandwidth_TBps": 4.0, "layers": 31}, "31-layer"),
])
def test_a_file_of_another_shape_gets_no_floor(doc, match):
    with pytest.raises(ValueError, match=match):
        bf.step_floor_ms(doc, 512)


def test_layers_from_the_arguments():
    doc = {"weight_GB": bf.weight_bytes(2) / 1e9, "copy_bandwidth_TBps": 4.0, "args": {"layers": 2}}
    assert bf.layers_of(doc) == 2
