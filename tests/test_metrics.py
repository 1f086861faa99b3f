import keras
import numpy as np
import pytest

from keras_tfm import metrics
from keras_tfm.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy
from tests.helpers import to_numpy

RNG = np.random.default_rng(0)
LOGITS = RNG.normal(size=(3, 5, 7)).astype("float32") * 3
LABELS = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 1, 0], [2, 0, 0, 0, 0]], "int32")  # 0 = padding


def reference(labels, logits, smoothing):
    """Cross-entropy against the explicitly smoothed one-hot target, by hand in NumPy, over real tokens."""
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = np.eye(logits.shape[-1])[labels] * (1 - smoothing) + smoothing / logits.shape[-1]
    losses = -(target * log_p).sum(-1)
    real = labels != 0
    return losses[real].mean()


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_label_smoothed_loss_equals_the_one_hot_formula(smoothing):
    loss = MaskedSparseCategoricalCrossentropy(from_logits=True, label_smoothing=smoothing)
    np.testing.assert_allclose(to_numpy(loss(LABELS, LOGITS)), reference(LABELS, LOGITS, smoothing), rtol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_probabilities_and_logits_give_the_same_loss(smoothing):
    probabilities = to_numpy(keras.ops.softmax(LOGITS, axis=-1))
    from_logits = MaskedSparseCategoricalCrossentropy(from_logits=True, label_smoothing=smoothing)(LABELS, LOGITS)
    from_probs = MaskedSparseCategoricalCrossentropy(from_logits=False, label_smoothing=smoothing)(LABELS, probabilities)
    np.testing.assert_allclose(to_numpy(from_probs), to_numpy(from_logits), rtol=1e-4)


def test_smoothing_matches_keras_categorical_crossentropy():
    # Keras' own label smoothing on the one-hot target, averaged over the real tokens only.
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1, reduction=None)
    per_token = to_numpy(keras_loss(keras.ops.one_hot(LABELS, 7), LOGITS))
    ours = MaskedSparseCategoricalCrossentropy(from_logits=True, label_smoothing=0.1)(LABELS, LOGITS)
    np.testing.assert_allclose(to_numpy(ours), per_token[LABELS != 0].mean(), rtol=1e-5)


def test_padding_positions_do_not_change_the_loss():
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    changed = LOGITS.copy()
    changed[LABELS == 0] = RNG.normal(size=changed[LABELS == 0].shape) * 50
    np.testing.assert_allclose(to_numpy(loss(LABELS, changed)), to_numpy(loss(LABELS, LOGITS)), rtol=1e-6)


def test_unshifted_targets_get_a_hint():
    loss = MaskedSparseCategoricalCrossentropy()
    with pytest.raises(ValueError, match=r"labels have 6 positions but the predictions 5.*target\[:, :-1\]"):
        loss(np.ones((3, 6), "int32"), LOGITS)
    with pytest.raises(ValueError, match="shift the targets"):
        MaskedAccuracy().update_state(np.ones((3, 4), "int32"), LOGITS)


def test_masked_accuracy_counts_real_tokens_only():
    logits = np.eye(7, dtype="float32")[LABELS] * 5  # right everywhere, padding included
    logits[0, 0] = np.eye(7)[3] * 5  # one wrong real token out of 8
    logits[2, 3] = np.eye(7)[5] * 5  # a wrong prediction at a padding position does not count
    metric = MaskedAccuracy()
    metric.update_state(LABELS, logits)
    assert float(to_numpy(metric.result())) == pytest.approx(7 / 8)


def test_the_loss_is_each_replicas_share_under_a_tf_distribute_strategy(monkeypatch):
    """As Keras' own losses: with 2 replicas each returns half its mean (their gradients are summed)."""
    loss = MaskedSparseCategoricalCrossentropy(from_logits=True)
    whole = float(to_numpy(loss(LABELS, LOGITS)))
    monkeypatch.setattr(metrics, "_replicas_in_sync", lambda: 2)
    assert float(to_numpy(loss(LABELS, LOGITS))) == pytest.approx(whole / 2, rel=1e-6)


def test_only_the_tensorflow_backend_asks_tensorflow_for_replicas():
    on_tensorflow = keras.backend.backend() == "tensorflow"
    assert hasattr(metrics, "tf") == on_tensorflow  # the module imports TensorFlow on its own backend only
    assert metrics._replicas_in_sync() == 1  # no strategy here
