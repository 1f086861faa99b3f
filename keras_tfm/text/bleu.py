"""Corpus BLEU computed the sacreBLEU way.

`corpus_bleu(hypotheses, references)` is BLEU (Papineni et al., 2002) as sacreBLEU computes it: detokenized
hypotheses against raw references, its "13a" tokenization, corpus-level n-gram statistics, exponential
smoothing. It calls the `sacrebleu` package, so numbers are comparable with published sacreBLEU scores.
"""

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
