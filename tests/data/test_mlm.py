"""BERT's masking in the data pipeline: rates, padding, labels, seeds."""

import numpy as np
import pytest

from keras_tfm.data import stratified_split
from keras_tfm.data.mlm import mask_tokens, masked_lm_dataset, max_predictions_for, vocabulary_with_mask

pytestmark = pytest.mark.tensorflow_only(reason="tf.data")

MASK, VOCAB = 2, 1000


def sequences(rows=400, length=128, seed=0):
    """Random word ids (3..VOCAB-1) with random lengths, right-padded with 0."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, VOCAB, size=(rows, length))
    lengths = rng.integers(10, length + 1, size=rows)
    ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
    return ids.astype("int32")


def masked(ids, seed=(0, 0), **options):
    inputs, labels = mask_tokens(ids, mask_token_id=MASK, vocab_size=VOCAB, seed=seed, **options)
    return inputs["token_ids"].numpy(), inputs["mask_positions"].numpy(), labels.numpy()


def test_rates_match_bert_over_many_tokens():
    ids = sequences()
    new, positions, labels = masked(ids)
    used = labels != 0
    chosen_rows = np.repeat(np.arange(len(ids)), used.sum(1))
    chosen = positions[used]
    real = (ids != 0).sum()
    assert abs(used.sum() / real - 0.15) < 0.005  # 15% of the real tokens (rounded per sequence)
    after = new[chosen_rows, chosen]
    original = ids[chosen_rows, chosen]
    assert np.array_equal(labels[used], original)  # the labels are the words that were there
    as_mask, unchanged = np.mean(after == MASK), np.mean(after == original)
    randomised = 1 - as_mask - unchanged
    assert abs(as_mask - 0.8) < 0.03 and abs(randomised - 0.1) < 0.02 and abs(unchanged - 0.1) < 0.02
    # Everything that was not chosen is exactly as it was.
    untouched = np.ones_like(ids, bool)
    untouched[chosen_rows, chosen] = False
    assert np.array_equal(new[untouched], ids[untouched])
    # Random replacements are real words, never padding, unknown or [MASK].
    assert after[(after != MASK) & (after != original)].min() > MASK


def test_padding_is_never_chosen_and_positions_are_distinct():
    ids = sequences(seed=1)
    _, positions, labels = masked(ids, seed=(3, 4))
    used = labels != 0
    rows = np.repeat(np.arange(len(ids)), used.sum(1))
    assert np.all(ids[rows, positions[used]] != 0)
    for row in range(len(ids)):
        assert len(set(positions[row][used[row]])) == used[row].sum()
    assert np.all(positions[~used] == 0)  # unused slots: position 0, label 0 (ignored by the loss)
    assert positions.shape == (len(ids), max_predictions_for(ids.shape[1])) == (len(ids), 20)


def test_an_empty_sequence_gets_no_prediction_and_a_short_one_at_least_one():
    ids = np.zeros((2, 16), "int32")
    ids[1, :3] = [7, 8, 9]
    _, _, labels = masked(ids)
    assert (labels[0] != 0).sum() == 0 and (labels[1] != 0).sum() == 1


def test_the_same_seed_gives_the_same_masks_and_another_seed_others():
    ids = sequences(rows=50)
    first, again, other = masked(ids, seed=(0, 1)), masked(ids, seed=(0, 1)), masked(ids, seed=(0, 2))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[1], other[1])


def test_the_dataset_masks_afresh_every_epoch_and_replays_with_its_seed():
    ids = sequences(rows=64, length=32)

    def two_epochs(seed):
        dataset = masked_lm_dataset(ids, 32, mask_token_id=MASK, vocab_size=VOCAB, seed=seed, shuffle=False)
        return [labels.numpy() for _, labels in dataset.take(4)]  # 2 batches per pass

    epochs = two_epochs(0)
    assert not np.array_equal(epochs[0], epochs[2])  # same sequences, new masks in the second pass
    assert all(np.array_equal(a, b) for a, b in zip(epochs, two_epochs(0)))
    assert not np.array_equal(epochs[0], two_epochs(1)[0])


@pytest.mark.parametrize(
    "options, match",
    [(dict(rate=1.5), "`rate` must be in"), (dict(mask_rate=0.9, random_rate=0.2), "at most 1"),
     (dict(first_random_id=VOCAB), "first_random_id")],
)
def test_bad_options_are_clear_errors(options, match):
    with pytest.raises(ValueError, match=match):
        masked(sequences(rows=2), **options)


def test_the_mask_token_takes_id_2_and_the_size_is_kept():
    vocabulary, mask_id = vocabulary_with_mask(["", "[UNK]", "the", "a", "film"])
    assert vocabulary == ["", "[UNK]", "[MASK]", "the", "a"] and mask_id == 2
    with pytest.raises(ValueError, match="must start with the padding and unknown tokens"):
        vocabulary_with_mask(["the", "a"])


def test_stratified_split_holds_out_the_same_share_of_every_class():
    labels = np.array([0] * 900 + [1] * 100)
    train, validation = stratified_split(labels, 0.1, seed=0)
    assert len(validation) == 100 and np.sum(labels[validation] == 1) == 10
    assert np.array_equal(np.sort(np.concatenate([train, validation])), np.arange(1000))
    assert np.array_equal(validation, stratified_split(labels, 0.1, seed=0)[1])
    assert not np.array_equal(validation, stratified_split(labels, 0.1, seed=1)[1])
    assert len(stratified_split(labels, 50, seed=0)[1]) == 50
    for bad in (0.0, 1.0, 1000, "10%"):
        with pytest.raises(ValueError, match="`validation` must be a fraction"):
            stratified_split(labels, bad)
