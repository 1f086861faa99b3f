"""keras_tfm.data.digits: the generated digit tasks."""

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
    with pytest.raises(ValueError, match="`task` must be one of"):
        digits.make_dataset(5, 5, "shuffle")
