"""Reading the model of a saved pipeline (`TextClassifierPipeline`, `Translator`)."""


def load_pipeline_model(directory):
    """The `model.keras` in a saved pipeline's `directory`, for inference (no optimizer state restored), with
    `keras_tfm.load_model`'s clear errors for a missing or truncated file."""
    from keras_tfm import saving  # it imports this package

    return saving.load_model(directory, compile=False)
