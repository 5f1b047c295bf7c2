"""The potential: a BNN's (or NumPyro model's) negative log posterior, sharded and chunked."""
