"""Prompt ids with exactly one BOS, the doubled-BOS reproduction, and check_bos."""

import warnings

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from hybridsd.prompts import build_prompt_ids, check_bos

BOS, EOS = "<|begin_of_text|>", "<|eot_id|>"
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def _tokenizer(template: str | None = TEMPLATE, bos: bool = True) -> PreTrainedTokenizerFast:
    """A tiny byte-level BPE, Llama-3-like: BOS added on plain encoding, a chat template writing it too."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [BOS, EOS, "<|start_header_id|>", "<|end_header_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["hello world", "def f(x): return x", "the quick brown fox jumps"] * 5, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, 0)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS if bos else None, eos_token=EOS)
    hf.chat_template = template
    return hf


@pytest.fixture(scope="module")
def tok():
    return _tokenizer()


def test_chat_prompt_has_exactly_one_bos(tok):
    ids = build_prompt_ids(tok, "hello world")
    bos = tok.bos_token_id
    assert ids[0] == bos and ids.count(bos) == 1
    text = tok.apply_chat_template([{"role": "user", "content": "hello world"}], tokenize=False,
                                   add_generation_prompt=True)
    assert ids == tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids).endswith("assistant<|end_header_id|>\n\n")
    assert check_bos(ids, tok, on_error="raise") is None


def test_doubled_mode_reproduces_the_bug(tok):
    single = build_prompt_ids(tok, "hello world")
    doubled = build_prompt_ids(tok, "hello world", bos_mode="doubled")
    assert doubled == [tok.bos_token_id] + single
    with pytest.warns(UserWarning, match="doubled BOS"):
        problem = check_bos(doubled, tok)
    assert "doubled" in problem
    with pytest.raises(ValueError, match="doubled BOS"):
        check_bos(doubled, tok, on_error="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "doubled" in check_bos(doubled, tok, on_error="ignore")


def test_missing_bos_is_reported(tok):
    ids = build_prompt_ids(tok, "hello world")[1:]
    with pytest.warns(UserWarning, match="does not start with BOS"):
        check_bos(ids, tok)
    with pytest.raises(ValueError):
        check_bos(ids, tok, on_error="raise")
    assert check_bos(ids, tok, on_error="ignore", expect_bos=False) is None


def test_messages_and_system(tok):
    ids = build_prompt_ids(tok, [{"role": "user", "content": "hi"}], system="be brief")
    text = tok.decode(ids)
    assert text.index("system") < text.index("be brief") < text.index("user") < text.index("hi")
    assert ids.count(tok.bos_token_id) == 1
    with pytest.raises(ValueError):
        build_prompt_ids(tok, [{"role": "system", "content": "a"}], system="b")
    with pytest.raises(ValueError):
        build_prompt_ids(tok, [{"content": "no role"}])
    with pytest.raises(ValueError):
        build_prompt_ids(tok, "hi", bos_mode="triple")


def test_raw_mode_uses_the_tokenizers_default(tok):
    ids = build_prompt_ids(tok, "hello world", chat=False)
    assert ids == tok.encode("hello world")
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    assert check_bos(ids, tok, on_error="raise") is None
    for kwargs in ({"system": "x"}, {"bos_mode": "doubled"}):
        with pytest.raises(ValueError):
            build_prompt_ids(tok, "hello", chat=False, **kwargs)
    with pytest.raises(ValueError):
        build_prompt_ids(tok, [{"role": "user", "content": "hi"}], chat=False)


def test_tokenizers_without_template_or_bos():
    no_template = _tokenizer(template=None)
    with pytest.raises(ValueError, match="chat template"):
        build_prompt_ids(no_template, "hello")
    no_bos = _tokenizer(template=TEMPLATE.replace("{{ bos_token }}", ""), bos=False)
    ids = build_prompt_ids(no_bos, "hello")
    assert check_bos(ids, no_bos, on_error="raise") is None  # nothing to check without a BOS token
    with pytest.raises(ValueError):
        check_bos([1, 2], no_bos, on_error="loud")


def test_check_bos_takes_the_shapes_apply_chat_template_returns(tok):
    """``apply_chat_template(..., return_tensors="pt")`` gives a ``[1, T]`` tensor (or its encoding): one prompt."""
    torch = pytest.importorskip("torch")
    messages = [{"role": "user", "content": "hello world"}]
    ids = build_prompt_ids(tok, "hello world")
    bos = tok.bos_token_id
    doubled = [bos] + ids
    for form in (torch.tensor([doubled]), torch.tensor(doubled), [doubled], tuple(doubled),
                 {"input_ids": torch.tensor([doubled])}):
        assert "doubled" in check_bos(form, tok, on_error="ignore")
    assert check_bos(torch.tensor([ids]), tok, on_error="raise") is None
    out = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    assert check_bos(out, tok, on_error="raise") is None
    if isinstance(out, torch.Tensor) or "input_ids" in out:
        flat = out if isinstance(out, torch.Tensor) else out["input_ids"]
        assert flat.shape[0] == 1 and check_bos(flat, tok, on_error="raise") is None


@pytest.mark.parametrize("ids", ["<s>hi", 5, None, [[1, 2], [3, 4]], [1.0, 2.0], [True, 2]])
def test_check_bos_refuses_what_is_not_one_prompt(tok, ids):
    with pytest.raises(TypeError, match="ids must be"):
        check_bos(ids, tok)


def test_check_bos_refuses_tensors_of_other_shapes(tok):
    torch = pytest.importorskip("torch")
    for ids in (torch.tensor(5), torch.ones(2, 3, dtype=torch.long), torch.tensor([1.0, 2.0])):
        with pytest.raises(TypeError, match=r"one prompt \(a list, a 1-D tensor or a \[1, T\] tensor\), got Tensor"):
            check_bos(ids, tok)
