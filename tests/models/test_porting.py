"""`keras_tfm.models._porting`, the checkpoint-porting engine both loaders use: each layout by hand, and `plan`'s
records of what does not fit. The loaders are tested end to end against real files in test_vit_weights.py and
test_text_weights.py."""

import numpy as np
import pytest

from keras_tfm.models import _porting

pytestmark = pytest.mark.tensorflow_only(reason="NumPy only: no backend code")


def test_each_layout_by_hand():
    heads, head_dim, dim = 2, 3, 4
    linear = np.arange(12.0).reshape(3, 4)  # PyTorch (out=3, in=4)
    np.testing.assert_array_equal(_porting.TORCH_LINEAR.convert(linear, (4, 3)), linear.T)
    assert _porting.TORCH_LINEAR.expected((4, 3)) == (3, 4)
    query = np.arange(24.0).reshape(heads * head_dim, dim)  # (heads * head_dim, dim)
    split = _porting.TORCH_HEADS_IN.convert(query, (dim, heads, head_dim))
    np.testing.assert_array_equal(split[:, 1, 2], query[1 * head_dim + 2])  # head 1, channel 2 = row 5
    assert _porting.TORCH_HEADS_IN.expected((dim, heads, head_dim)) == (6, 4)
    output = np.arange(24.0).reshape(dim, heads * head_dim)  # (dim, heads * head_dim)
    merged = _porting.TORCH_HEADS_OUT.convert(output, (heads, head_dim, dim))
    np.testing.assert_array_equal(merged[1, 2], output[:, 5])
    bias = np.arange(6.0)
    np.testing.assert_array_equal(_porting.TORCH_HEADS_BIAS.convert(bias, (heads, head_dim))[1], [3.0, 4.0, 5.0])
    conv = np.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)  # (out, in, height, width)
    kernel = _porting.TORCH_CONV.convert(conv, (4, 5, 3, 2))
    assert kernel[1, 2, 0, 1] == conv[1, 0, 1, 2]
    assert _porting.POSITION_TABLE.expected((9, 8)) == (1, None, 8)


def test_fused_query_key_value_takes_its_third():
    qkv = np.arange(3 * 6 * 4.0).reshape(18, 4)  # timm: query, key, value stacked along the output axis
    key = _porting.fused(1, _porting.TORCH_HEADS_IN)
    assert key.expected((4, 2, 3)) == (18, 4)
    np.testing.assert_array_equal(key.convert(qkv, (4, 2, 3)), qkv[6:12].T.reshape(4, 2, 3))


def test_plan_converts_what_fits_and_records_the_rest_in_order():
    tensors = {"a": np.ones((3, 2)), "b": np.ones((5,)), "c": np.ones((1, 7, 4))}
    values, missing, mismatched = _porting.plan(
        [("w1", "a", (2, 3), _porting.TORCH_LINEAR), ("w2", "b", (4,), _porting.SAME),
         ("w3", "gone", (2,), _porting.SAME), ("w4", "c", (9, 4), _porting.POSITION_TABLE)], tensors)
    assert sorted(values) == ["w1", "w4"] and values["w1"].shape == (2, 3) and values["w4"].shape == (7, 4)
    assert missing == [_porting.Missing("w3", "gone")]
    assert mismatched == [_porting.Mismatched("w2", "b", (5,), (4,))]
