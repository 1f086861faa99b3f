"""keras_tfm.data.digits: the generated digit tasks."""

import numpy as np
import pytest

from keras_tfm.data import digits

pytestmark = pytest.mark.tensorflow_only(reason="NumPy data generation, no backend code")


def test_digit_tasks():
    source, target = digits.make_dataset(50, 5, "sort", seed=1)
    for row in range(50):
        text = digits.decode(source[row])
        assert digits.decode(target[row]) == "".join(sorted(text))
        assert target[row, 0] == digits.START and digits.END in target[row]
    reverse_source, reverse_target = digits.make_dataset(5, 5, "reverse", seed=1)
    assert digits.decode(reverse_target[0]) == digits.decode(reverse_source[0])[::-1]
    assert digits.exact_match(reverse_target[:, 1:], reverse_target) == 1.0


def test_exact_match_counts_whole_answers_worked_by_hand():
    target = np.array([[1, 5, 6, 2, 0], [1, 7, 8, 2, 0], [1, 9, 2, 0, 0], [1, 4, 4, 2, 0]])  # <s> digits </s> pad
    generated = np.array([[5, 6, 2, 0, 3],   # right (what follows the target's length is not compared)
                          [7, 9, 2, 0, 0],   # one digit wrong
                          [9, 2, 0, 0, 0],   # right, padded
                          [4, 4, 4, 2, 0]])  # right digits, end token too late
    assert digits.exact_match(generated, target) == 0.5
    with pytest.raises(ValueError, match="`task` must be one of"):
        digits.make_dataset(5, 5, "shuffle")
