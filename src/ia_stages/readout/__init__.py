"""Read-outs: every way to turn a kappa^max graph or distances into clusters, and the stopping
rules."""
