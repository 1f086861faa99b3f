"""`keras_tfm.load_model`: a saved keras_tfm model (a `.keras` file, or a folder keras_tfm saved) back, with clear
errors.

`keras.saving.load_model` reports a truncated `.keras` file as "File not found". This names the problem: a missing
file, a folder without a model, a file that is not a whole `.keras` archive. Every class a keras_tfm model refers
to (layers, models, losses, metrics, schedules) is registered by `import keras_tfm`, which runs before this module.
"""

import os
import zipfile

import keras

# A saved folder keeps its model under this name: a `TextClassifierPipeline`'s, a `Translator`'s, and any folder
# that follows the same layout (the recipes' finished runs do).
MODEL_FILE = "model.keras"


def load_model(path, compile=True, **kwargs):
    """Loads a `.keras` file saved from a keras_tfm model, or the model of a saved folder.

    Args:
        path: a `.keras` file, or a folder holding `model.keras` (`MODEL_FILE`: a saved `TextClassifierPipeline`
            or `Translator`, or a finished run of `python -m recipes.<name>`).
        compile: whether to restore the optimizer, loss and metrics too (as `keras.saving.load_model`).
        **kwargs: passed on to `keras.saving.load_model` (`custom_objects`, `safe_mode`).

    Returns:
        The model, with its weights as saved.

    Raises:
        FileNotFoundError: nothing at `path`, or a folder without `model.keras`.
        ValueError: a file that is not a complete `.keras` archive (truncated, or another format).

    Example:

    >>> model = keras_tfm.load_model("runs/reverse_digits/20261201-120000")  # doctest: +SKIP
    >>> model.generate(source_ids, max_new_tokens=11, start_id=1, end_id=2)  # doctest: +SKIP
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        folder, path = path, os.path.join(path, MODEL_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"`path` is a folder without {MODEL_FILE}: {folder!r}. A saved pipeline or a finished recipe run "
                "keeps its model there; an unfinished run has only its backup/ (resume the run to finish it).")
    elif not os.path.exists(path):
        raise FileNotFoundError(f"`path` does not exist: {path!r}. Expected a .keras file or a run folder.")
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path!r} is not a complete .keras file ({os.path.getsize(path):,} bytes, not a readable zip "
            "archive): it may have been cut off while being written or copied. Save or copy it again.")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            broken = archive.testzip()
    except (zipfile.BadZipFile, OSError) as error:
        raise ValueError(f"{path!r} is a damaged .keras file: {error}") from None
    if broken is not None or "config.json" not in names:
        what = f"its member {broken!r} is damaged" if broken else "it has no config.json"
        raise ValueError(f"{path!r} is not a usable .keras file: {what}. Save or copy it again.")
    return keras.saving.load_model(path, compile=compile, **kwargs)
