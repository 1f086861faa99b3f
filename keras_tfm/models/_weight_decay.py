"""Which weights weight decay skips: a rule for what it covers, and a short list of names for the rest.

Weight decay pulls weights towards 0. That regularises the matrices that mix features; it does no good to a bias
or a norm's scale and offset (decaying a norm's scale towards 0 shrinks what the layer passes on, which no amount
of data asks for). timm and nanoGPT exempt them by a rule, not by name: every weight of rank 0 or 1, and every
bias (ours have rank 2 in attention: `(heads, head_dim)`). What the rule does not cover a model names itself in
`no_weight_decay()`, as timm's models do: tables that are not transforms, such as position embeddings and
learned [CLS] tokens.
"""


class WeightDecayPolicy:
    """Mixin: the model says which of its weights weight decay should skip, and tells an optimizer.

    A weight is exempt when it is a bias, has rank 0 or 1 (norm scales and offsets, scalars such as the locality
    scale), or its name is in `no_weight_decay()`. Everything else (kernels, token tables) decays.

    Example:

    >>> model = ViT.from_preset("tiny", num_classes=10)
    >>> optimizer = model.exclude_from_weight_decay(keras.optimizers.AdamW(1e-3, weight_decay=0.05))
    >>> sorted({v.name for v in model.weight_decay_exempt_variables()})  # doctest: +SKIP
    ['beta', 'bias', 'gamma', 'position_embeddings']
    """

    def no_weight_decay(self):
        """Names of the weights of rank 2 or more, other than biases, that weight decay skips (timm's
        `no_weight_decay`); none by default. Biases and weights of rank 0 or 1 are exempt by rule.

        Returns:
            A tuple of variable names (`variable.name`, matched exactly).
        """
        return ()

    def is_exempt_from_weight_decay(self, variable):
        """Whether weight decay skips `variable` (see the class docstring).

        Args:
            variable: a `keras.Variable` of this model.

        Returns:
            True for biases, weights of rank 0 or 1, and the names in `no_weight_decay()`.
        """
        return len(variable.shape) <= 1 or variable.name == "bias" or variable.name in self.no_weight_decay()

    def weight_decay_exempt_variables(self):
        """The trainable variables weight decay skips, in `trainable_variables` order."""
        return [variable for variable in self.trainable_variables if self.is_exempt_from_weight_decay(variable)]

    def exclude_from_weight_decay(self, optimizer):
        """Tells `optimizer` (e.g. `keras.optimizers.AdamW`, before its first step) to skip the exempt variables,
        and returns it.

        Variables, not `optimizer.exclude_from_weight_decay(var_names=...)`: that searches its patterns in the
        variable's full path on the TensorFlow backend, where "token" would also exempt `token_embedding/...`.

        Args:
            optimizer: a Keras optimizer with weight decay.

        Returns:
            `optimizer`.
        """
        optimizer.exclude_from_weight_decay(var_list=self.weight_decay_exempt_variables())
        return optimizer
