"""Full-batch HMC and NUTS: NumPyro's kernels on the sharded potential, their checks and runner."""
