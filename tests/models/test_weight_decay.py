"""Which weights weight decay skips (`keras_tfm.models._weight_decay`): by rule every bias and every weight of
rank 0 or 1 (norm scales and offsets, the locality scale), as timm and nanoGPT do; by name only what the rule
does not cover (position tables, learned [CLS] tokens). Kernels and token tables decay."""

import keras
import numpy as np
import pytest

from keras_tfm.models import MaskedLanguageModel, Seq2SeqTransformer, TextClassifier, TransformerLM, ViT, ViTBackbone
from tests.helpers import to_numpy

pytestmark = pytest.mark.tensorflow_only(reason=(
    "the optimizer's exemption lists, checked on TensorFlow (CI's time budget)"))


def vit():
    return ViT(ViTBackbone(image_size=8, patch_size=4, dim=16, depth=1, num_heads=2, mlp_dim=32, position="learned",
                           locality=True), num_classes=3)


def text_classifier():
    return TextClassifier.from_preset("tiny", vocab_size=20, max_length=8, dim=16, depth=1, num_heads=2, mlp_dim=32,
                                      position="learned", pool="cls")


MODELS = {
    "ViT": vit,
    "TextClassifier": text_classifier,
    "TransformerLM": lambda: TransformerLM(vocab_size=20, dim=16, depth=1, num_heads=2, mlp_dim=32, max_length=8),
    "Seq2SeqTransformer": lambda: Seq2SeqTransformer(20, 20, dim=16, encoder_depth=1, decoder_depth=1, num_heads=2,
                                                     mlp_dim=32, max_length=8, position="learned"),
    "MaskedLanguageModel": lambda: MaskedLanguageModel.from_preset("tiny", vocab_size=20, max_length=8, dim=16, depth=1,
                                                                   num_heads=2, mlp_dim=32, position="learned"),
}


@pytest.mark.parametrize("build", [vit, text_classifier], ids=["ViT", "TextClassifier"])
def test_every_bias_and_every_weight_of_rank_one_or_less_is_exempt_and_kernels_are_not(build):
    model = build()
    exempt = {id(v) for v in model.weight_decay_exempt_variables()}
    for variable in model.trainable_variables:
        if len(variable.shape) <= 1 or variable.name == "bias":
            assert id(variable) in exempt, variable.path
        if variable.name in ("kernel", "embeddings"):  # matrices and the token table
            assert id(variable) not in exempt, variable.path
    names = {v.name for v in model.weight_decay_exempt_variables()}
    assert names >= {"bias", "gamma", "beta", "position_embeddings"}
    assert ("locality_scale" in names) == isinstance(model, ViT)  # a scalar: by rule
    assert ("cls_token" if isinstance(model, ViT) else "token") in names  # the learned [CLS] token: by name


@pytest.mark.parametrize("name", list(MODELS))
def test_the_name_lists_hold_only_what_the_rule_does_not_cover(name):
    model = MODELS[name]()
    named = [v for v in model.trainable_variables if v.name in model.no_weight_decay()]
    assert all(len(v.shape) >= 2 and v.name != "bias" for v in named)
    assert named or not model.no_weight_decay() or isinstance(model, MaskedLanguageModel)  # (no [CLS] token)


@pytest.mark.parametrize("name", list(MODELS))
def test_adamw_decays_exactly_the_weights_that_are_not_exempt(name):
    model = MODELS[name]()
    optimizer = model.exclude_from_weight_decay(keras.optimizers.AdamW(learning_rate=1.0, weight_decay=0.5))
    variables = model.trainable_variables
    before = [to_numpy(v).copy() for v in variables]
    optimizer.apply_gradients([(keras.ops.zeros(v.shape, v.dtype), v) for v in variables])  # only decay moves
    exempt = {id(v) for v in model.weight_decay_exempt_variables()}
    for variable, old in zip(variables, before):
        assert (not np.allclose(to_numpy(variable), old)) == (id(variable) not in exempt), variable.path
