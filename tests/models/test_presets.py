"""`PresetMixin` (`keras_tfm.models._config`): presets and configs, and the renamed `activation` argument —
`head_activation` for a classifier's head, `mlp_activation` for the blocks' feed-forward network. The old name
still works for one release: as a keyword and in a saved `.keras` file, with a FutureWarning."""

import json
import zipfile

import keras
import numpy as np
import pytest

from keras_tfm.models import Seq2SeqTransformer, TextClassifier, TextEncoder, TransformerLM, ViT, ViTBackbone
from tests.helpers import to_numpy

pytestmark = pytest.mark.tensorflow_only(reason="argument checks and presets: plain Python")

IDS = np.array([[3, 5, 7, 2, 0, 0, 0, 0]], "int32")
# (class, constructor arguments, the new name, a value other than its default, an input)
CASES = {
    "ViT": (ViT, dict(backbone=ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32),
                      num_classes=3),
            "head_activation", "softmax", np.random.default_rng(0).uniform(0, 255, (1, 8, 8, 3)).astype("float32")),
    "TextClassifier": (TextClassifier, dict(encoder=TextEncoder(vocab_size=20, max_length=8, dim=16, depth=1,
                                                                num_heads=2, mlp_dim=32)),
                       "head_activation", "softmax", IDS),
    "TextEncoder": (TextEncoder, dict(vocab_size=20, max_length=8, dim=16, depth=1, num_heads=2, mlp_dim=32),
                    "mlp_activation", "relu", IDS),
    "TransformerLM": (TransformerLM, dict(vocab_size=20, dim=16, depth=1, num_heads=2, mlp_dim=32, max_length=8),
                      "mlp_activation", "relu", IDS),
    "Seq2SeqTransformer": (Seq2SeqTransformer, dict(source_vocab_size=20, target_vocab_size=20, dim=16,
                                                    encoder_depth=1, decoder_depth=1, num_heads=2, mlp_dim=32,
                                                    max_length=8),
                           "mlp_activation", "relu", (IDS, IDS)),
}


def _same_outputs(a, b, x):
    b.set_weights(a.get_weights())
    np.testing.assert_allclose(to_numpy(b(x)), to_numpy(a(x)), atol=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_get_config_writes_the_new_name_and_an_old_config_builds_the_same_model(name):
    cls, arguments, new, value, x = CASES[name]
    model = cls(**arguments, **{new: value})
    config = model.get_config()
    assert config[new] == value and "activation" not in config
    old = {("activation" if key == new else key): item for key, item in config.items()}
    with pytest.warns(FutureWarning, match=rf"`activation` is deprecated, use `{new}`"):
        rebuilt = cls.from_config(old)
    assert getattr(rebuilt, new) == value and rebuilt.get_config() == config
    _same_outputs(model, rebuilt, x)


@pytest.mark.parametrize("name", list(CASES))
def test_the_old_keyword_still_works_with_a_warning_naming_the_new_one(name):
    cls, arguments, new, value, _ = CASES[name]
    with pytest.warns(FutureWarning, match=rf"{cls.__name__}: `activation` is deprecated, use `{new}`"):
        model = cls(**arguments, activation=value)
    assert getattr(model, new) == value
    with pytest.raises(TypeError, match=rf"pass `{new}` only \(`activation` is its old name\)"):
        cls(**arguments, activation=value, **{new: "tanh"})


def test_the_mlp_activation_reaches_the_blocks_and_the_head_activation_the_head():
    lm = TransformerLM(vocab_size=20, dim=16, depth=1, num_heads=2, mlp_dim=32, max_length=8, mlp_activation="relu")
    assert lm.get_layer("block_0").activation is keras.activations.relu
    vit = ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32), num_classes=3,
              head_activation="softmax")
    assert vit.get_layer("head").activation is keras.activations.softmax
    assert vit.get_layer("block_0").activation is keras.activations.gelu  # the MLP keeps its own default


def test_text_classifier_from_encoder_takes_the_old_head_keyword():
    encoder = TextEncoder(vocab_size=20, max_length=8, dim=16, depth=1, num_heads=2, mlp_dim=32)
    with pytest.warns(FutureWarning, match="use `head_activation`"):
        model = TextClassifier.from_encoder(encoder, activation="softmax")
    assert model.head_activation == "softmax"


@pytest.mark.parametrize("name", ["ViT", "TransformerLM"])
def test_a_keras_file_saved_with_the_old_name_still_loads(name, tmp_path):
    cls, arguments, new, value, x = CASES[name]
    model = cls(**arguments, **{new: value})
    path = tmp_path / "new.keras"
    model.save(path)
    # The same file as an older keras_tfm wrote it: `activation` in the model's config.
    old_path = tmp_path / "old.keras"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(old_path, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                saved = json.loads(data)
                saved["config"]["activation"] = saved["config"].pop(new)
                data = json.dumps(saved).encode()
            target.writestr(item, data)
    with pytest.warns(FutureWarning, match=f"use `{new}`"):
        loaded = keras.saving.load_model(old_path)
    assert getattr(loaded, new) == value
    np.testing.assert_allclose(to_numpy(loaded(x)), to_numpy(model(x)), atol=1e-6)
