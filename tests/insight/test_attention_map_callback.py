import glob
import json
import os

import keras
import numpy as np
import pytest

from keras_tfm.callbacks import AttentionMapCallback, PositionEncodingPlot
from keras_tfm.insight import visualize
from keras_tfm.insight.attribution import occlusion_map
from keras_tfm.insight.explorer import data_path
from keras_tfm.models import TextClassifier, ViT, ViTBackbone
from tests.helpers import padded_ids, reverse_digits, small_reverser
from tests.insight.test_visualize import png_size


def vit_and_data():
    keras.utils.set_random_seed(3)
    model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=2, num_heads=2, mlp_dim=32, dropout=0.1,
                            position="learned"), num_classes=3, dropout=0.1)
    x = np.random.default_rng(0).integers(0, 256, (12, 8, 8, 3)).astype("uint8")
    return model, x, np.arange(12) % 3


def fit(model, x, y, callbacks):
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model.fit(x, y, epochs=2, batch_size=4, shuffle=False, callbacks=callbacks, verbose=0).history


def test_image_callback_writes_pngs_tensorboard_and_arrays(tmp_path):
    model, x, y = vit_and_data()
    callback = AttentionMapCallback(x[:2], output_dir=tmp_path / "maps", class_names=["a", "b", "c"],
                                    log_dir=str(tmp_path / "logs"), save_arrays=True)
    fit(model, x, y, [callback, PositionEncodingPlot("patch_embedding", output_dir=tmp_path / "positions")])
    names = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "maps" / "*")))
    assert names == [  # frame 0 (before training), then every epoch with how far each head moved since
        "before_attention.npz",
        "epoch_000_attention.npz", "epoch_000_block_1_heads.png", "epoch_000_rollout_0.png", "epoch_000_rollout_1.png",
        "epoch_001_attention.npz", "epoch_001_block_1_heads.png", "epoch_001_change.png", "epoch_001_rollout_0.png",
        "epoch_001_rollout_1.png",
        "epoch_002_attention.npz", "epoch_002_block_1_heads.png", "epoch_002_change.png", "epoch_002_rollout_0.png",
        "epoch_002_rollout_1.png",
    ]
    for path in glob.glob(str(tmp_path / "maps" / "*.png")):
        width, height = png_size(path)
        assert width >= 200 and height >= 100
    arrays = np.load(tmp_path / "maps" / "epoch_002_attention.npz")
    assert list(arrays["names"]) == ["block_0", "block_1"]
    assert arrays["layer_0"].shape == (1, 2, 5, 5)  # BertViz layout: (1, heads, q, k) per layer
    events = glob.glob(str(tmp_path / "logs" / "events.out.tfevents.*"))
    assert events and os.path.getsize(events[0]) > 1000
    assert len(glob.glob(str(tmp_path / "positions" / "*.png"))) == 2


def test_callback_does_not_change_training(tmp_path):
    model, x, y = vit_and_data()
    without = fit(model, x, y, [])
    model, x, y = vit_and_data()
    with_maps = fit(model, x, y, [AttentionMapCallback(x[:2], output_dir=tmp_path)])
    assert without["loss"] == with_maps["loss"]


def test_text_pictures_leave_out_a_padding_id_other_than_zero(tmp_path):
    """RoBERTa pads with 1: the explorer's words of sample 0 are its real tokens, not the padding."""
    from keras_tfm.models import TextEncoder

    encoder = TextEncoder(vocab_size=10, max_length=8, dim=16, depth=1, num_heads=2, mlp_dim=32, padding_id=1)
    classifier = TextClassifier(encoder=encoder, pool="mean")
    ids = np.array([[4, 0, 7, 1, 1, 1], [5, 6, 1, 1, 1, 1]])  # 0 is a word here
    callback = AttentionMapCallback(ids, output_dir=tmp_path, tokens=[f"w{i}" for i in range(10)], padding_id=1)
    callback.set_model(classifier)
    assert callback._sample_tokens() == ["w4", "w0", "w7"]
    callback.draw(1)
    assert "epoch_001_tokens_1.png" in {os.path.basename(p) for p in callback.written}


def test_text_and_seq2seq_pictures(tmp_path):
    classifier = TextClassifier.from_preset("tiny", vocab_size=10, max_length=8, dim=16, depth=1, num_heads=2,
                                            mlp_dim=32)
    callback = AttentionMapCallback(padded_ids([3, 6], 6, 10), output_dir=tmp_path / "text",
                                    tokens=[f"w{i}" for i in range(10)])
    callback.set_model(classifier)
    callback.draw(1)
    assert sorted(os.path.basename(p) for p in callback.written) == [
        "epoch_001_block_0_heads.png", "epoch_001_tokens_0.png", "epoch_001_tokens_1.png"
    ]
    reverser = small_reverser()
    source, target = reverse_digits(2, seed=0)
    callback = AttentionMapCallback((source, target[:, :-1]), output_dir=tmp_path / "s2s", every_n_epochs=2,
                                    save_arrays=True)
    callback.set_model(reverser)
    callback.on_epoch_end(0)  # not a multiple of 2: nothing
    assert callback.written == []
    callback.on_epoch_end(1)
    assert {os.path.basename(p) for p in callback.written} == {
        "epoch_002_alignment_0.png", "epoch_002_alignment_1.png", "epoch_002_decoder_block_1-cross_attention_heads.png",
        "epoch_002_attention.npz",
    }
    arrays = np.load(tmp_path / "s2s" / "epoch_002_attention.npz")
    assert {"encoder_0", "encoder_1", "decoder_0", "decoder_1", "cross_0", "cross_1"} <= set(arrays.files)


def test_decoder_pictures_say_that_row_t_predicts_token_t_plus_1(monkeypatch, tmp_path):
    """The rows of a decoder's maps are its inputs (start token first): a learner reading row "0" must know it is
    the step that writes the token after "0". An encoder's rows are just queries."""
    figures = {}
    monkeypatch.setattr(visualize, "save_figure", lambda figure, path: figures.setdefault(os.path.basename(path), figure))
    source, target = reverse_digits(1, seed=0)
    callback = AttentionMapCallback((source, target[:, :-1]), output_dir=tmp_path)
    callback.set_model(small_reverser())
    callback.draw(1)
    assert figures["epoch_001_alignment_0.png"].axes[0].get_ylabel() == visualize.DECODER_ROWS
    assert figures["epoch_001_decoder_block_1-cross_attention_heads.png"].axes[0].get_ylabel() == visualize.DECODER_ROWS
    assert visualize.DECODER_ROWS == "decoder input (row t predicts token t+1)"
    classifier = TextClassifier.from_preset("tiny", vocab_size=10, max_length=8, dim=16, depth=1, num_heads=2,
                                            mlp_dim=32)
    callback = AttentionMapCallback(padded_ids([3], 6, 10), output_dir=tmp_path / "text")
    callback.set_model(classifier)
    callback.draw(1)
    assert figures["epoch_001_block_0_heads.png"].axes[0].get_ylabel() == "query (attending)"


def test_bad_arguments():
    with pytest.raises(ValueError, match="`kind` must be one of"):
        AttentionMapCallback(np.zeros((1, 4)), kind="audio")
    with pytest.raises(ValueError, match="`every_n_epochs` must be a positive integer"):
        AttentionMapCallback(np.zeros((1, 4), "int32"), every_n_epochs=0)
    with pytest.raises(ValueError, match="Cannot tell the kind"):
        AttentionMapCallback(np.zeros((1, 4, 4)))


def test_empty_or_missing_inputs_are_refused_when_the_callback_is_made():
    x = np.zeros((4, 8, 8, 3), "uint8")
    for inputs in (x[:0], (np.zeros((0, 5), "int32"), np.zeros((0, 4), "int32")), np.float32(1.0)):
        with pytest.raises(ValueError, match=r"`inputs` must hold at least one sample .*Received: inputs of shape"):
            AttentionMapCallback(inputs)
    with pytest.raises(ValueError, match=r"`inputs` must be the fixed sample to draw.*Received: inputs=None"):
        AttentionMapCallback(None)
    assert AttentionMapCallback(x[:1]).kind == "image"  # one sample is enough


def test_heads_pictures_show_the_first_sample_real_tokens(tmp_path, monkeypatch):
    drawn = []
    plot = visualize.plot_attention_heads
    monkeypatch.setattr(visualize, "plot_attention_heads", lambda *a, **k: drawn.append(plot(*a, **k)) or drawn[-1])

    def labels(figure):
        ax = figure.axes[0]
        return ax.images[0].get_array().shape, [t.get_text() for t in ax.get_yticklabels()], [
            t.get_text() for t in ax.get_xticklabels()]

    vocabulary = [f"w{i}" for i in range(10)]
    ids = np.array([[4, 7, 2, 0, 0, 0], [1, 2, 3, 4, 5, 6]], "int32")  # sample 0: 3 words, 3 padding
    for pool, words in (("cls", ["[CLS]", "w4", "w7", "w2"]), ("mean", ["w4", "w7", "w2"])):
        classifier = TextClassifier.from_preset("tiny", vocab_size=10, max_length=8, dim=16, depth=1, num_heads=2,
                                                mlp_dim=32, pool=pool)
        callback = AttentionMapCallback(ids, output_dir=tmp_path / pool, tokens=vocabulary)
        callback.set_model(classifier)
        callback.draw(1)
        assert labels(drawn[-1]) == ((len(words), len(words)), words, words)
    callback = AttentionMapCallback(np.zeros((1, 6), "int32"), output_dir=tmp_path / "empty", tokens=vocabulary)
    callback.set_model(classifier)
    callback.draw(1)  # an all-padding sample: nothing to label, the whole map numbered rather than an error
    assert labels(drawn[-1])[0] == (6, 6)

    reverser = small_reverser()
    source, target = reverse_digits(2, seed=0)
    callback = AttentionMapCallback((source, target[:, :-1]), output_dir=tmp_path / "s2s")
    callback.set_model(reverser)
    callback.draw(1)
    real_source = [str(i) for i in source[0] if i]
    real_target = [str(i) for i in target[0, :-1] if i]
    # The last map is the decoder's cross-attention: target tokens (rows) over source tokens (columns).
    assert labels(drawn[-1]) == ((len(real_target), len(real_source)), real_target, real_source)


def test_image_pictures_of_a_small_data_vit(tmp_path):
    """Conv stem, locality self-attention and sequence pooling: no [CLS] token, a masked diagonal."""
    keras.utils.set_random_seed(3)
    model = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=2, num_heads=2, mlp_dim=32, tokenizer="conv",
                            locality=True, class_token=False), num_classes=3, pool="sequence")
    x = np.random.default_rng(0).integers(0, 256, (8, 8, 8, 3)).astype("uint8")
    callback = AttentionMapCallback(x[:2], output_dir=tmp_path / "maps", save_arrays=True, html=True)
    fit(model, x, np.arange(8) % 3, [callback])
    arrays = np.load(tmp_path / "maps" / "epoch_002_attention.npz")
    assert arrays["layer_0"].shape == (1, 2, 4, 4)  # 2x2 patches, no [CLS] token
    assert np.all(np.diagonal(arrays["layer_1"], axis1=-2, axis2=-1) == 0.0)
    # no [CLS] token: occlusion pictures, not the rollout's position prior
    assert os.path.exists(tmp_path / "maps" / "epoch_002_occlusion_1.png")
    assert not glob.glob(str(tmp_path / "maps" / "*rollout*"))
    assert os.path.getsize(callback.html_path) > 1000
    # the page opens on sample 0's occlusion map, one per frame, the same shares as the picture's
    data = json.loads(open(data_path(callback.html_path), encoding="utf-8").read())
    assert data["start"]["imageLayer"] == "relevance" and len(data["relevance"]) == len(data["epochs"]) == 3
    drops = occlusion_map(model, x[:1])[0]
    np.testing.assert_allclose(data["relevance"][-1], np.maximum(drops, 0).ravel() / np.maximum(drops, 0).sum(),
                               atol=5e-5)


def test_history_starts_before_training_labels_frames_and_ends_with_the_last_epoch(tmp_path):
    """Frame 0 is the model before fit; frames are named by `epoch_label`; a run shorter than `every_n_epochs`
    still writes its pictures and the page it promises (drawn at the end of training)."""
    import json

    from keras_tfm.insight.explorer import data_path

    keras.utils.set_random_seed(0)
    model = TextClassifier.from_preset("tiny", vocab_size=10, max_length=8, dim=16, depth=2, num_heads=2, mlp_dim=32)
    x = padded_ids([3, 6, 5, 4], 6, 10)
    y = np.array([0, 1, 0, 1])
    callback = AttentionMapCallback(x[:2], output_dir=tmp_path, tokens=[f"w{i}" for i in range(10)], html=True,
                                    class_names=["neg", "pos"], labels=y[:2], every_n_epochs=10,
                                    before_label="before fine-tuning", epoch_label=lambda e: f"epoch {e / 2:g}")
    model.compile_for_training()
    model.fit(x, y, epochs=3, batch_size=2, callbacks=[callback], verbose=0)
    with open(data_path(callback.html_path)) as file:
        data = json.load(file)
    assert data["labels"] == ["before fine-tuning", "epoch 1.5"] and data["epochs"] == ["0", "3"]
    assert "change" in data["views"]
    names = {os.path.basename(p) for p in callback.written}
    assert {"epoch_000_tokens_0.png", "epoch_003_tokens_0.png", "epoch_003_change.png",
            "epoch_003_change_row.png"} <= names
    assert os.path.exists(callback.html_path)
    titles = callback._predicted_names()
    assert titles[0].startswith("true: neg, predicted: ") and " (p = 0." in titles[0]


def test_a_resumed_run_keeps_its_first_frame(tmp_path):
    keras.utils.set_random_seed(0)
    model = TextClassifier.from_preset("tiny", vocab_size=10, max_length=8, dim=16, depth=1, num_heads=2, mlp_dim=32)
    x, y = padded_ids([3, 6], 6, 10), np.array([0, 1])
    model.compile_for_training()
    first = AttentionMapCallback(x, output_dir=tmp_path, html=True)
    model.fit(x, y, epochs=1, callbacks=[first], verbose=0)
    before = np.load(tmp_path / "before_attention.npz")["map_0"]
    again = AttentionMapCallback(x, output_dir=tmp_path, html=True)
    model.fit(x, y, epochs=2, initial_epoch=1, callbacks=[again], verbose=0)
    assert not any("epoch_000" in p for p in again.written)  # not drawn again from the trained model
    np.testing.assert_array_equal(np.load(tmp_path / "before_attention.npz")["map_0"], before)
