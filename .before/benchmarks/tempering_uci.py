"""Does parallel tempering make a UCI reference converge where plain HMC's chains never meet?

On yacht split 0 the four chains of ``reference_hmc`` sit in basins hundreds of nats apart
(README, "Reference posteriors": R-hat of the predictive means up to 2.84, 0 % <= 1.01). This
runs :class:`bnn_ppl.inference.ParallelTempering` on the same model (``examples/reference.py``'s
MLP(50), N(0, 1), Gaussian likelihood with a HalfNormal(1) noise scale) with ``--chains``
independent ladders from prior draws, vectorized, and prints what the stopping rule of
``reference_hmc`` would say of the β = 1 rungs (rank-normalised split R-hat and bulk ESS of
the test predictive means), each ladder's mean log posterior at β = 1, the ladder respaced in
warmup, the swap rates along it and the BMA's test RMSE and log-likelihood in the target's units.

    python benchmarks/tempering_uci.py --dataset yacht --temperatures 16 --min-beta 1e-4
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from numpyro.infer import MCMC

import bnn_ppl as bp
from bnn_ppl.function_values import function_values
from bnn_ppl.inference import ParallelTempering, full_batch_potential
from bnn_ppl.inference.stopping_rule import check_convergence
from bnn_ppl.models import mlp_bnn


def main(a: argparse.Namespace) -> None:
    data = bp.data.load_subset(a.dataset, split=a.split)
    model = mlp_bnn(data, a.width, 1.0)
    pot = full_batch_potential(model, data.x_train, data.y_train)
    kernel = ParallelTempering(pot, num_temperatures=a.temperatures, min_beta=a.min_beta,
                               num_steps=a.num_steps)  # fmt: skip
    mcmc = MCMC(kernel, num_warmup=a.num_warmup, num_samples=a.num_samples,
                num_chains=a.chains, chain_method="vectorized", progress_bar=False,
                jit_model_args=True)  # fmt: skip
    t0 = time.time()
    mcmc.run(jax.random.key(a.seed), *pot.args,
             extra_fields=("potential_energy", "swap_rate", "accept_prob", "betas"))  # fmt: skip
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    seconds = time.time() - t0
    extra = mcmc.get_extra_fields(group_by_chain=True)
    values = function_values(model, samples, data.x_test, "mean")
    conv = check_convergence(values)
    lp = -np.asarray(extra["potential_energy"])
    pred = bp.bma(bp.predict(model, samples, data.x_test))
    mean, scale = np.asarray(pred.mean).reshape(-1), np.asarray(pred.scale).reshape(-1)
    y_std = float(data.y_std)
    rmse = float(bp.metrics.rmse(mean, data.y_test)) * y_std
    ll = -float(bp.metrics.gaussian_nll(mean, scale, data.y_test)) - float(np.log(y_std))
    grads = a.chains * a.temperatures * a.num_steps * (a.num_warmup + a.num_samples)
    print(f"{data.name} split {a.split}: {data.x_train.shape[0]} train / "
          f"{data.x_test.shape[0]} test rows, MLP({a.width}), {pot.num_params} parameters")
    print(f"parallel tempering: {a.chains} ladders x {a.temperatures} temperatures down to "
          f"{a.min_beta:g}, {a.num_steps} leapfrog steps, {a.num_warmup} + {a.num_samples} "
          f"sweeps, {grads:,} gradients, {seconds:.0f} s")  # fmt: skip
    print(f"predictive means: R-hat <= 1.01 for {100 * conv['share_rhat_ok']:.0f} % of "
          f"{conv['size']} (max {conv['rhat_max']:.3f}), bulk ESS min "
          f"{conv['ess_bulk_min']:.0f} / median {conv['ess_bulk_median']:.0f}; converged by "
          f"the reference rule: {conv['converged']}")  # fmt: skip
    print("mean log posterior at beta = 1 per ladder:", np.round(lp.mean(axis=1), 1).tolist(),
          "(sd within", np.round(lp.std(axis=1), 1).tolist(), ")")  # fmt: skip
    print(
        "ladder after warmup (first ladder):", np.asarray(extra["betas"])[0, -1].round(4).tolist()
    )
    rates = np.asarray(extra["swap_rate"])[:, -1]
    print("swap rates along the ladder (min over ladders):", rates.min(0).round(2).tolist())
    print("accept prob at beta = 1 per ladder:",
          np.asarray(extra["accept_prob"])[..., 0].mean(1).round(2).tolist())  # fmt: skip
    print(f"BMA test RMSE {rmse:.3f}, test LL {ll:.3f} (target units)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="yacht")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--temperatures", type=int, default=16)
    p.add_argument("--min-beta", type=float, default=1e-4)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--num-warmup", type=int, default=1000)
    p.add_argument("--num-samples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    main(p.parse_args())
