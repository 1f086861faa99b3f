"""Mixed precision and XLA for the ready models (the layers' own contract is in tests/layers)."""

import keras
import numpy as np
import pytest

from keras_tfm.models import Seq2SeqTransformer, TextClassifier, ViT
from tests.helpers import padded_ids, to_numpy


def vit():
    model = ViT(image_size=8, patch_size=4, num_classes=3, dim=16, depth=1, num_heads=2, mlp_dim=32)
    return model, np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3)).astype("uint8"), np.arange(4) % 3


def text_classifier():
    model = TextClassifier(vocab_size=20, max_length=16, dim=16, depth=1, num_heads=2, mlp_dim=32)
    return model, padded_ids([5, 8, 3, 2], 8), np.array([0, 1, 1, 0])


def seq2seq():
    model = Seq2SeqTransformer(20, 20, dim=16, encoder_depth=1, decoder_depth=1, num_heads=2, mlp_dim=32, max_length=8)
    target = padded_ids([5, 8, 3, 2], 8, seed=1)
    return model, (padded_ids([4, 6, 2, 7], 6), target[:, :-1]), target[:, 1:]


MODELS = {"ViT": vit, "TextClassifier": text_classifier, "Seq2SeqTransformer": seq2seq}


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_mixed_precision_gives_finite_float32_outputs(name, policy):
    keras.config.set_dtype_policy(policy)
    model, x, y = MODELS[name]()
    out = model(x)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"  # logits stay float32 for the loss
    assert np.all(np.isfinite(to_numpy(out)))
    if isinstance(model, Seq2SeqTransformer):
        if keras.backend.backend() == "jax" and policy == "mixed_float16":
            pytest.skip("XLA:CPU has no float16 dot_general with float32 accumulation (JAX's fused attention)")
        assert model.generate(x[0], max_length=5).shape == (4, 5)


@pytest.mark.parametrize("name", list(MODELS))
def test_jit_compiled_training_step(name):
    model, x, y = MODELS[name]()
    if isinstance(model, Seq2SeqTransformer):
        model.compile_for_training(jit_compile=True)
    else:
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=True)
    history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
