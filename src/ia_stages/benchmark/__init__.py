"""The clustering benchmark: the method table, baselines, metrics and the paper's theory checks."""
