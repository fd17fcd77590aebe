"""Invariant Attention itself: the attention step, the invariant mean, class averages and the
scikit-learn estimator. Math only, no file I/O."""
