"""Reference runs: HMC (or parallel tempering) in segments until the test predictions converge."""
