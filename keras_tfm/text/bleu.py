"""Corpus BLEU computed the sacreBLEU way.

`corpus_bleu(hypotheses, references)` is BLEU (Papineni et al., 2002) as sacreBLEU computes it: detokenized
hypotheses against raw references, its "13a" tokenization, corpus-level n-gram statistics, exponential
smoothing. It calls the `sacrebleu` package, so numbers are comparable with published sacreBLEU scores.

`ValidationBLEU` scores a translation model on held-out sentences while it trains.
"""

import time

import keras
import sacrebleu


def corpus_bleu(hypotheses, references, lowercase=False):
    """Corpus BLEU in [0, 100], computed by sacreBLEU (13a tokenization, exponential smoothing).

    Args:
        hypotheses: list of detokenized system outputs (strings).
        references: list of reference strings, one per hypothesis; for several references per sentence, a
            list of such lists (each one reference for every hypothesis, as sacreBLEU takes them).
        lowercase: case-insensitive BLEU.

    Returns:
        `(score, signature)`: the BLEU score and sacreBLEU's signature string, which says how it was computed
        (report it next to the score).
    """
    hypotheses = list(hypotheses)
    reference_sets = [list(references)] if references and isinstance(references[0], str) else [list(r) for r in references]
    for number, reference_set in enumerate(reference_sets):
        if len(reference_set) != len(hypotheses):
            raise ValueError(
                f"`references` must have one entry per hypothesis: got {len(hypotheses)} hypotheses and "
                f"{len(reference_set)} references (set {number})."
            )
    metric = sacrebleu.BLEU(lowercase=lowercase)
    score = metric.corpus_score(hypotheses, reference_sets)
    return score.score, str(metric.get_signature())


class ValidationBLEU(keras.callbacks.Callback):
    """Corpus BLEU on held-out sentences every few epochs, written into the epoch logs as `val_bleu`.

    Loss and accuracy under teacher forcing say little about translations: the model never sees its own
    mistakes. This callback translates `sources` with `translator` (greedy by default: fast, and close to beam
    search in ranking epochs) and scores them against `references` with `corpus_bleu`. The score goes into the
    epoch's `logs`, so the callbacks after this one in the list see it: `keras.callbacks.History` (it is in
    `fit`'s returned history), `CSVLogger`, `TensorBoard` (a `val_bleu` curve), `EarlyStopping(monitor="val_bleu",
    mode="max")`, `ModelCheckpoint(monitor="val_bleu", mode="max", save_best_only=True)` and
    `keras_tfm.callbacks.CheckpointAverage(monitor="val_bleu")`. Put it first in the list.

    Use validation sentences, never the test set: a checkpoint chosen on the test set scores too high there.

    Args:
        translator: a `keras_tfm.Translator` around the model being trained (or anything with
            `generate(texts, strategy=..., **kwargs)` returning strings).
        sources: source sentences (list of str).
        references: their reference translations (list of str, one per source).
        every_n_epochs: score every this many epochs (and after the last epoch of `fit`); epochs in between get
            no value in their logs.
        name: the key in the logs.
        strategy: the decoding strategy, `"greedy"` or `"beam"` (then pass `num_beams`, `length_penalty`).
        verbose: whether to print the score.
        **generate_kwargs: passed to `translator.generate`.

    Attributes:
        scores: `{epoch: BLEU}` of the epochs scored (epochs counted from 0).

    Example:

    >>> bleu = ValidationBLEU(Translator(model, tokenizer), valid_en, valid_de)  # doctest: +SKIP
    >>> stop = keras.callbacks.EarlyStopping(monitor="val_bleu", mode="max", patience=3)  # doctest: +SKIP
    >>> model.fit(train, epochs=30, callbacks=[bleu, stop])  # doctest: +SKIP
    >>> history.history["val_bleu"]  # doctest: +SKIP
    """

    def __init__(self, translator, sources, references, every_n_epochs=1, name="val_bleu", strategy="greedy",
                 verbose=True, **generate_kwargs):
        super().__init__()
        if not callable(getattr(translator, "generate", None)):
            raise TypeError("`translator` must have a `generate(texts, strategy=...)` method (a keras_tfm.Translator). "
                            f"Received: translator={type(translator).__name__}")
        for argument, texts in (("sources", sources), ("references", references)):
            if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
                raise TypeError(f"`{argument}` must be a list of strings. Received: {str(texts)[:80]!r}")
        sources, references = list(sources), list(references)
        if not sources or len(sources) != len(references):
            raise ValueError(f"`sources` and `references` must be non-empty and of one length. Received: "
                             f"{len(sources)} sources and {len(references)} references")
        if isinstance(every_n_epochs, bool) or not isinstance(every_n_epochs, int) or every_n_epochs < 1:
            raise ValueError(f"`every_n_epochs` must be a positive integer. Received: every_n_epochs={every_n_epochs!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")
        self.translator, self.sources, self.references = translator, sources, references
        self.every_n_epochs, self.name, self.strategy = every_n_epochs, name, strategy
        self.verbose, self.generate_kwargs = verbose, generate_kwargs
        self.scores = {}

    def score(self):
        """Corpus BLEU of the model as it is now on the held-out sentences."""
        outputs = self.translator.generate(self.sources, strategy=self.strategy, **self.generate_kwargs)
        return corpus_bleu(outputs, self.references)[0]

    def on_epoch_end(self, epoch, logs=None):
        last = self.params.get("epochs") if self.params else None
        if (epoch + 1) % self.every_n_epochs and epoch + 1 != last:
            return
        started = time.time()
        bleu = self.score()
        self.scores[epoch] = bleu
        if logs is not None:
            logs[self.name] = bleu
        if self.verbose:
            print(f"epoch {epoch + 1}: {self.name} {bleu:.2f} ({self.strategy}, {len(self.sources)} sentences, "
                  f"{time.time() - started:.0f} s)")
