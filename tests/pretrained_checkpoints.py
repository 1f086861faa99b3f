"""Tiny random BERT, DistilBERT and RoBERTa checkpoints written by HuggingFace `transformers` itself, for the tests
of checkpoint import (`keras_tfm.models.text_weights`) and of `PretrainedTokenizer`: nothing is downloaded."""

import os

import numpy as np
import pytest

WORDS = ["the", "film", "was", "great", "awful", "a", "moving", "story", "dull", "and", "too", "long", "i", "loved",
         "it", "hated", "plot", "actors", "wonder", "##ful", "##ly", "bad", "good", ",", ".", "!", "not", "very"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=40)


def transformers_or_skip():
    pytest.importorskip("torch", reason="transformers needs PyTorch to write its checkpoints")
    return pytest.importorskip("transformers", reason="transformers writes the reference checkpoints")


def write_checkpoint(folder, model_type="bert", seed=0, task_head=False, tokenizer=True, **config_overrides):
    """Writes a random `model_type` model (`BertModel`, `DistilBertModel`, `RobertaModel`; with `task_head` the
    `...ForSequenceClassification` model) with `save_pretrained` (config.json + model.safetensors), and a WordPiece
    tokenizer.json over `WORDS`. Returns `(folder, the transformers model in eval mode)`."""
    transformers = transformers_or_skip()
    import torch

    torch.manual_seed(seed)
    vocab_size = len(SPECIAL) + len(WORDS)
    config_overrides.setdefault("attn_implementation", "eager")  # the attention weights are compared
    if model_type == "bert":
        config = transformers.BertConfig(vocab_size=vocab_size, **SIZES, **config_overrides)
        model = (transformers.BertForSequenceClassification if task_head else transformers.BertModel)(config)
    elif model_type == "roberta":
        config = transformers.RobertaConfig(vocab_size=vocab_size, pad_token_id=1, type_vocab_size=1, **{
            **SIZES, "max_position_embeddings": SIZES["max_position_embeddings"] + 2}, **config_overrides)
        model = (transformers.RobertaForSequenceClassification if task_head else transformers.RobertaModel)(config)
    elif model_type == "distilbert":
        config = transformers.DistilBertConfig(vocab_size=vocab_size, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                               max_position_embeddings=40, **config_overrides)
        model = (transformers.DistilBertForSequenceClassification if task_head else transformers.DistilBertModel)(config)
    else:
        raise ValueError(model_type)
    with torch.no_grad():  # random LayerNorm scales and biases too, so that a misplaced one shows
        for name, parameter in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))
    model.eval()
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    if tokenizer:
        write_tokenizer(folder)
    return folder, model


def write_tokenizer(folder):
    """A BERT WordPiece tokenizer (lower-casing, [CLS] text [SEP]) saved by transformers as tokenizer.json."""
    transformers = transformers_or_skip()
    vocab = os.path.join(folder, "vocab.txt")
    with open(vocab, "w") as file:
        file.write("\n".join(SPECIAL + WORDS) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab, do_lower_case=True)
    tokenizer.save_pretrained(folder)
    return tokenizer


def reference_outputs(model, ids, mask):
    """transformers' last hidden states and attention weights (NumPy) for ids and a 0/1 mask."""
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask, dtype=torch.long),
                    output_attentions=True)
    return out.last_hidden_state.numpy(), [a.numpy() for a in out.attentions]


def padded_batch(model_type, seed=0):
    """Token ids `(3, 12)` of three texts of 12, 7 and 3 tokens, padded with the model type's padding id, and the
    0/1 padding mask."""
    rng = np.random.default_rng(seed)
    padding = 1 if model_type == "roberta" else 0
    lengths = [12, 7, 3]
    ids = np.full((3, 12), padding, dtype="int32")
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(5, len(SPECIAL) + len(WORDS), n)
    mask = (np.arange(12)[None, :] < np.array(lengths)[:, None]).astype("int32")
    return ids, mask
