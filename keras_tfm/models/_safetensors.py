"""Reading a `.safetensors` checkpoint (HuggingFace, timm) with the `safetensors` library, with clear errors."""

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")  # F64, F32, F16, BF16 (bfloat16 via ml_dtypes)


def read_safetensors(path, floats_only=False):
    """`{name: float32 NumPy array}` of every tensor in the `.safetensors` file at `path`.

    Args:
        path: the file.
        floats_only: refuse a tensor that is not F64, F32, F16 or BF16 (weights of a model that has only float
            weights); otherwise integer tensors (BERT's `position_ids` buffer) are converted too.

    Returns:
        A dict of float32 arrays, in the file's order.

    Raises:
        ValueError: naming `path`, for a file that is not safetensors or is cut short, or (with `floats_only`)
            for a tensor of another dtype.

    Example:

    >>> tensors = read_safetensors("model.safetensors")  # doctest: +SKIP
    >>> tensors["cls_token"].shape  # doctest: +SKIP
    (1, 1, 768)
    """
    try:
        tensors = load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(f"{path} is not a readable safetensors file (not one, or cut short): {error}") from None
    if floats_only:
        for name, array in tensors.items():
            if array.dtype.name not in FLOAT_DTYPES:
                raise ValueError(f"Tensor `{name}` in {path} has dtype {array.dtype.name}; only "
                                 f"{', '.join(FLOAT_DTYPES)} tensors are supported.")
    return {name: np.asarray(array, dtype="float32") for name, array in tensors.items()}
