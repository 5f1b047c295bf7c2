"""Checkpoints: NumPyro MCMC in committed segments that resume bit-exactly, and fit's
checkpoints."""
