"""Checkpoint import: tiny random BERT, DistilBERT and RoBERTa models written by `transformers` itself load into
`TextEncoder` and give transformers' hidden states and attention weights at every real token."""

import json
import os

import keras
import numpy as np
import pytest

import keras_tfm
from keras_tfm.models import TextClassifier, TextEncoder
from tests.pretrained_checkpoints import padded_batch, reference_outputs, write_checkpoint

MODEL_TYPES = ("bert", "distilbert", "roberta")


@pytest.fixture(scope="module", params=MODEL_TYPES)
def checkpoint(request, tmp_path_factory):
    folder, model = write_checkpoint(str(tmp_path_factory.mktemp(request.param)), request.param)
    return request.param, folder, model


def states(outputs):
    return keras.ops.convert_to_numpy(outputs["sequence_output"] if isinstance(outputs, dict) else outputs)


def test_hidden_states_and_attention_equal_transformers_at_every_real_token(checkpoint):
    model_type, folder, reference = checkpoint
    encoder = TextEncoder.from_pretrained(folder)
    ids, mask = padded_batch(model_type)
    hidden, attentions = reference_outputs(reference, ids, mask)
    real = mask.astype(bool)  # (batch, length)

    np.testing.assert_allclose(states(encoder(ids))[real], hidden[real], atol=2e-5)
    maps = keras_tfm.attention_maps(encoder, ids)
    assert list(maps) == ["block_0", "block_1"]
    for ours, theirs in zip(maps.values(), attentions):  # (batch, heads, queries, keys)
        np.testing.assert_allclose(ours.transpose(0, 2, 1, 3)[real], theirs.transpose(0, 2, 1, 3)[real], atol=2e-6)
        assert np.all(ours.transpose(0, 3, 1, 2)[~real] == 0)  # padded keys get no weight


def test_padding_changes_nothing_at_real_tokens(checkpoint):
    model_type, folder, _ = checkpoint
    encoder = TextEncoder.from_pretrained(folder)
    ids, mask = padded_batch(model_type)
    padding = 1 if model_type == "roberta" else 0
    longer = np.concatenate([ids, np.full((3, 5), padding, "int32")], axis=1)
    real = mask.astype(bool)
    np.testing.assert_allclose(states(encoder(longer))[:, :12][real], states(encoder(ids))[real], atol=1e-5)
    # The dict form with an explicit padding mask is the same call.
    np.testing.assert_allclose(states(encoder({"token_ids": ids, "padding_mask": mask})), states(encoder(ids)),
                               atol=1e-6)


def test_the_architecture_comes_from_config_json(checkpoint):
    model_type, folder, _ = checkpoint
    encoder = TextEncoder.from_pretrained(folder)
    assert (encoder.dim, encoder.depth, encoder.num_heads, encoder.mlp_dim) == (32, 2, 4, 64)
    assert encoder.norm_first is False and encoder.embedding_norm and not encoder.scale_embeddings
    assert encoder.padding_id == (1 if model_type == "roberta" else 0)
    assert encoder.position_offset == (2 if model_type == "roberta" else 0)
    assert encoder.num_segments == {"bert": 2, "roberta": 1, "distilbert": 0}[model_type]
    assert encoder.pooler == (model_type != "distilbert")


def test_bert_pooler_and_segment_ids_match_transformers(tmp_path):
    import torch

    folder, reference = write_checkpoint(str(tmp_path / "bert"), "bert", seed=3)
    encoder = TextEncoder.from_pretrained(folder)
    ids, mask = padded_batch("bert", seed=3)
    segments = (np.arange(12)[None, :] >= 4).astype("int32") * mask  # a second text from position 4 on
    with torch.no_grad():
        out = reference(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                        token_type_ids=torch.tensor(segments, dtype=torch.long))
    ours = encoder({"token_ids": ids, "padding_mask": mask, "segment_ids": segments})
    real = mask.astype(bool)
    np.testing.assert_allclose(states(ours)[real], out.last_hidden_state.numpy()[real], atol=2e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ours["pooled_output"]), out.pooler_output.numpy(), atol=2e-5)


def test_a_task_checkpoint_loads_its_encoder_and_skips_the_head_saying_so(tmp_path):
    folder, reference = write_checkpoint(str(tmp_path / "task"), "bert", task_head=True)
    with pytest.warns(UserWarning, match=r"Skipped 2 tensors of a task head.*classifier\."):
        encoder = TextEncoder.from_pretrained(folder)
    ids, mask = padded_batch("bert")
    hidden, _ = reference_outputs(reference.bert, ids, mask)
    np.testing.assert_allclose(states(encoder(ids))[mask.astype(bool)], hidden[mask.astype(bool)], atol=2e-5)


def test_classifier_from_pretrained_fits_saves_and_reloads_exactly(tmp_path):
    folder, _ = write_checkpoint(str(tmp_path / "bert"), "bert")
    model = TextClassifier.from_pretrained(folder, num_classes=3)
    assert model.pool == "pooler" and model.encoder.name == "encoder"
    ids, _ = padded_batch("bert")
    model.compile(keras.optimizers.AdamW(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.predict(ids, verbose=0)
    history = model.fit(ids, np.array([0, 1, 2]), epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    after = model.predict(ids, verbose=0)
    assert np.abs(after - before).max() > 1e-3  # the encoder and head trained
    model.save(tmp_path / "classifier.keras")
    loaded = keras.saving.load_model(tmp_path / "classifier.keras")
    np.testing.assert_array_equal(loaded.predict(ids, verbose=0), after)
    assert isinstance(loaded.encoder, TextEncoder) and loaded.encoder.pooler and loaded.encoder.num_segments == 2


def test_loading_takes_seconds_and_reports_it(tmp_path):
    folder, _ = write_checkpoint(str(tmp_path / "bert"), "bert")
    encoder = TextEncoder.from_pretrained(folder)
    assert 0 < encoder.load_seconds < 30


# ---------------------------------------------------------------------------------------------------------------
# Bad folders and files fail clearly.

def test_a_missing_folder_or_config_is_named(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        TextEncoder.from_pretrained(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="No config.json"):
        TextEncoder.from_pretrained(str(tmp_path / "empty"))


def _edit_config(folder, **changes):
    path = os.path.join(folder, "config.json")
    with open(path) as file:
        config = json.load(file)
    config.update(changes)
    with open(path, "w") as file:
        json.dump(config, file)


def test_an_unsupported_model_type_names_the_supported_ones(tmp_path):
    folder, _ = write_checkpoint(str(tmp_path / "bert"), "bert", tokenizer=False)
    _edit_config(folder, model_type="gpt2")
    with pytest.raises(ValueError, match=r"Unsupported model_type 'gpt2'.*\['bert', 'distilbert', 'roberta'\]"):
        TextEncoder.from_pretrained(folder)


def test_a_missing_weights_file_is_named(tmp_path):
    folder, _ = write_checkpoint(str(tmp_path / "bert"), "bert", tokenizer=False)
    os.remove(os.path.join(folder, "model.safetensors"))
    with pytest.raises(ValueError, match="No model.safetensors"):
        TextEncoder.from_pretrained(folder)
    with open(os.path.join(folder, "model.safetensors"), "wb") as file:
        file.write(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        TextEncoder.from_pretrained(folder)


def _rewrite_tensors(folder, edit):
    from safetensors.numpy import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path)


def test_a_shape_that_does_not_fit_names_the_tensor_and_both_shapes(tmp_path):
    folder, _ = write_checkpoint(str(tmp_path / "bert"), "bert", tokenizer=False)
    _edit_config(folder, intermediate_size=48)  # the file's MLPs are 64 wide
    with pytest.raises(ValueError, match=r"'encoder\.layer\.0\.intermediate\.dense\.weight' has shape \(64, 32\); "
                                         r".* expects \(48, 32\)"):
        TextEncoder.from_pretrained(folder)


def test_missing_and_unused_tensors_are_named(tmp_path):
    folder, _ = write_checkpoint(str(tmp_path / "bert"), "bert", tokenizer=False)
    _rewrite_tensors(folder, lambda t: t.pop("encoder.layer.1.output.dense.bias"))
    with pytest.raises(ValueError, match=r"no tensor 'encoder\.layer\.1\.output\.dense\.bias'"):
        TextEncoder.from_pretrained(folder)

    folder, _ = write_checkpoint(str(tmp_path / "bert2"), "bert", tokenizer=False)
    _edit_config(folder, num_hidden_layers=1)  # the file has a second layer nobody reads
    with pytest.raises(ValueError, match=r"16 tensors .* not used .*'encoder\.layer\.1\."):
        TextEncoder.from_pretrained(folder)


def test_architecture_arguments_cannot_be_overridden(tmp_path):
    folder, _ = write_checkpoint(str(tmp_path / "bert"), "bert", tokenizer=False)
    with pytest.raises(TypeError, match=r"takes only .*Received: \['dim'\]"):
        TextEncoder.from_pretrained(folder, dim=64)
    encoder = TextEncoder.from_pretrained(folder, dropout=0.0, attention_dropout=0.0)
    assert encoder.dropout == 0.0 and encoder.attention_dropout == 0.0
    # BERT drops out after the MLP's output projection only, never after its activation: so does the port
    feed_forward = TextEncoder.from_pretrained(folder).get_layer("block_0").feed_forward
    assert (feed_forward.output_dropout.rate, feed_forward.hidden_dropout.rate) == (0.1, 0.0)


def test_a_folders_own_tokenizer_and_encoder_work_together(checkpoint):
    """The tokenizer of a checkpoint folder written by `transformers` feeds that folder's encoder directly: a
    DistilBERT (no segment table) gets no segment ids, even where its folder carries a BERT tokenizer.json (as
    here: `DistilBertModel` takes no token_type_ids)."""
    from keras_tfm.text import PretrainedTokenizer

    transformers = pytest.importorskip("transformers")
    import torch

    model_type, folder, reference = checkpoint
    texts = ["the film was great", "i hated the plot and the actors"]
    ours = PretrainedTokenizer(folder, max_length=12)(texts)
    theirs = transformers.AutoTokenizer.from_pretrained(folder)(texts, padding="max_length", max_length=12,
                                                                return_tensors="pt")
    assert ("segment_ids" in ours) == (model_type != "distilbert")  # DistilBertModel takes no token_type_ids
    encoder = TextEncoder.from_pretrained(folder)
    with torch.no_grad():
        expected = reference(input_ids=theirs["input_ids"],
                             attention_mask=theirs["attention_mask"]).last_hidden_state.numpy()
    real = ours["padding_mask"].astype(bool)
    np.testing.assert_allclose(states(encoder(ours))[real], expected[real], atol=2e-5)
