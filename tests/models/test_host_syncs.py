"""No device-to-host copy inside a training step: the ready models check their token ids on the host, before
`fit` starts, and the layers do not read tensor values back while Keras runs the steps. On a GPU every such read
waits for the device; on PyTorch and on JAX without jit it would happen at every step."""

import sys

import keras
import numpy as np
import pytest

from keras_tfm.models import Seq2SeqTransformer, TextClassifier, TransformerLM


def _text_classifier():
    model = TextClassifier.from_preset("tiny", vocab_size=30, max_length=12, dim=16, depth=1, num_heads=2, mlp_dim=32,
                                       num_classes=2)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=False)
    ids = np.random.default_rng(0).integers(1, 30, (32, 12)).astype("int32")
    return model, ids, ids[:, 0] % 2


def _seq2seq():
    model = Seq2SeqTransformer(source_vocab_size=30, target_vocab_size=30, max_length=12, dim=16, encoder_depth=1,
                               decoder_depth=1, num_heads=2, mlp_dim=32)
    model.compile_for_training(jit_compile=False)
    ids = np.random.default_rng(0).integers(1, 30, (32, 12)).astype("int32")
    return model, (ids, ids), ids


def _language_model():
    model = TransformerLM(vocab_size=30, max_length=12, dim=16, depth=1, num_heads=2, mlp_dim=32)
    model.compile_for_training(jit_compile=False)
    ids = np.random.default_rng(0).integers(1, 30, (32, 12)).astype("int32")
    return model, ids, ids


@pytest.mark.parametrize("build", [_text_classifier, _seq2seq, _language_model], ids=lambda f: f.__name__[1:])
def test_a_training_step_reads_no_values_back_to_the_host(build, monkeypatch):
    model, x, y = build()
    reads = []
    convert = keras.ops.convert_to_numpy

    def counting(value):  # a read of a backend tensor by keras_tfm (NumPy inputs are on the host already)
        if not isinstance(value, np.ndarray) and sys._getframe(1).f_globals.get("__name__", "").startswith("keras_tfm"):
            reads.append(1)
        return convert(value)

    monkeypatch.setattr(keras.ops, "convert_to_numpy", counting)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # traces (and, on TensorFlow, builds the graph)
    before = len(reads)
    # 2 steps, run by Keras eagerly on PyTorch / JAX; one batch shape throughout (eager JAX compiles every
    # operation anew for each new shape).
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert len(reads) - before == 0
    model.evaluate(x, y, batch_size=16, verbose=0)
    model.predict(x, batch_size=16, verbose=0)
    assert len(reads) - before == 0


def test_the_eager_call_still_checks_the_ids():
    model, x, _ = _text_classifier()
    with pytest.raises(ValueError, match=r"\[0, vocab_size\) = \[0, 30\)\. Received: an id of 30"):
        model(np.full((1, 12), 30, "int32"))
    with pytest.raises(ValueError, match="an id of 31"):
        model.encoder.get_layer("token_embedding")(np.full((1, 12), 31, "int32"))
