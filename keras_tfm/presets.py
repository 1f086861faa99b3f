"""Named model sizes, as plain dicts, in one place.

ViT names follow the paper ("ViT-B/16" = Base with 16x16 patches) and build the model the released checkpoints
fit: a learned position table and a [CLS] token (`position="learned"`, `pool="cls"`, as in the paper), so
`load_vit_weights` takes them as they are. The lower-case names are small sizes that train from scratch on a CPU
or one GPU, with the 2D sin-cos positions (the model's default). A preset fills in keyword arguments; anything
passed explicitly to `from_preset` wins.

Plain dicts: the recipes offer their names as `--preset` choices; the models read them through
`keras_tfm.models` (`VIT_PRESETS`, ...), the same dicts.

Example:

>>> from keras_tfm.presets import VIT_PRESETS
>>> VIT_PRESETS["tiny"]["patch_size"]
4
"""

_CHECKPOINT_LAYOUT = dict(position="learned", pool="cls")  # what every released ViT checkpoint has

VIT_PRESETS = {
    # From "An Image is Worth 16x16 Words" (Table 1) and DeiT (Ti, S).
    "ViT-Ti/16": dict(patch_size=16, dim=192, depth=12, num_heads=3, mlp_dim=768, **_CHECKPOINT_LAYOUT),
    "ViT-S/16": dict(patch_size=16, dim=384, depth=12, num_heads=6, mlp_dim=1536, **_CHECKPOINT_LAYOUT),
    "ViT-B/16": dict(patch_size=16, dim=768, depth=12, num_heads=12, mlp_dim=3072, **_CHECKPOINT_LAYOUT),
    "ViT-B/32": dict(patch_size=32, dim=768, depth=12, num_heads=12, mlp_dim=3072, **_CHECKPOINT_LAYOUT),
    "ViT-L/16": dict(patch_size=16, dim=1024, depth=24, num_heads=16, mlp_dim=4096, **_CHECKPOINT_LAYOUT),
    "ViT-L/32": dict(patch_size=32, dim=1024, depth=24, num_heads=16, mlp_dim=4096, **_CHECKPOINT_LAYOUT),
    "ViT-H/14": dict(patch_size=14, dim=1280, depth=32, num_heads=16, mlp_dim=5120, **_CHECKPOINT_LAYOUT),
    # Small sizes for 32x32 images (CIFAR-10) trained from scratch.
    "tiny": dict(image_size=32, patch_size=4, dim=128, depth=4, num_heads=4, mlp_dim=256),
    "small": dict(image_size=32, patch_size=4, dim=192, depth=6, num_heads=4, mlp_dim=384),
    "base": dict(image_size=32, patch_size=4, dim=384, depth=8, num_heads=6, mlp_dim=1152, drop_path=0.1),
    # A CPU-sized model with the small-data options: a two-stage convolutional stem (an 8x8 token grid, like
    # 4x4 patches), locality self-attention and sequence pooling (CCT, Hassani et al. 2021; Lee et al. 2021).
    "cifar10_cpu": dict(image_size=32, patch_size=4, dim=128, depth=4, num_heads=4, mlp_dim=256, tokenizer="conv",
                        locality=True, pool="sequence"),
}

TEXT_CLASSIFIER_PRESETS = {
    "tiny": dict(dim=64, depth=1, num_heads=2, mlp_dim=128),
    "small": dict(dim=128, depth=2, num_heads=4, mlp_dim=256),
    "base": dict(dim=256, depth=4, num_heads=8, mlp_dim=1024),
}

SEQ2SEQ_PRESETS = {
    "tiny": dict(dim=64, encoder_depth=2, decoder_depth=2, num_heads=4, mlp_dim=128),
    "small": dict(dim=256, encoder_depth=3, decoder_depth=3, num_heads=8, mlp_dim=512),
    # "Attention Is All You Need", base model (Table 3).
    "base": dict(dim=512, encoder_depth=6, decoder_depth=6, num_heads=8, mlp_dim=2048, dropout=0.1),
}

LANGUAGE_MODEL_PRESETS = {
    # nanoGPT's two Shakespeare-character sizes (config/train_shakespeare_char.py): its CPU run and its GPU run.
    "shakespeare_char_cpu": dict(dim=128, depth=4, num_heads=4, mlp_dim=512, max_length=64, dropout=0.0),
    "shakespeare_char": dict(dim=384, depth=6, num_heads=6, mlp_dim=1536, max_length=256, dropout=0.2),
    "tiny": dict(dim=32, depth=2, num_heads=2, mlp_dim=64, max_length=64),
}


# Choices the recipes offer as flags; the models and the tokenizer check against these.
TEXT_CLASSIFIER_POOLS = ("cls", "mean", "pooler")  # how TextClassifier turns the token states into one vector
SUBWORD_MODEL_TYPES = ("unigram", "bpe")  # SentencePiece's model types (keras_tfm.text.SubwordTokenizer)


def resolve_preset(presets, name, kind, overrides):
    """The preset's arguments updated with `overrides`; a clear error for an unknown name.

    Args:
        presets: one of the dicts above.
        name: the preset's name.
        kind: what the presets are of, said in the error ("ViT").
        overrides: keyword arguments that win over the preset's.

    Returns:
        The keyword arguments to build the model with.
    """
    if name not in presets:
        raise ValueError(f"Unknown {kind} preset {name!r}. Available presets: {sorted(presets)}")
    return {**presets[name], **overrides}
