"""R-hat in weight space vs function space, from several full-batch HMC chains.

The Stan-forum discussion of Izmailov et al. (2021): weight-space R-hat of a neural network is
poor (chains wander among permutation-equivalent modes, so they disagree about every weight),
while function-space R-hat - on the predictions - is mostly fine. Izmailov et al. accepted
R-hat <= 1.1 on predictions; Vehtari et al. (2021) ask for rank-normalised split R-hat <= 1.01.
This example runs ``--num-chains`` HMC chains on digits (:func:`bnn_ppl.inference.fit`),
computes both with :mod:`bnn_ppl.diagnostics` and prints the fraction of quantities above 1.01
and 1.1 in each space, the probabilities that fail R-hat <= 1.01 or bulk ESS >= 400 with the
chain that is the odd one out on them (:mod:`bnn_ppl.diagnostics.slow_values`), plus per-layer
summaries,
and saves the histogram figure.

"Function space" is itself a choice (:mod:`bnn_ppl.diagnostics.function_values`), and all three are
reported: every softmax probability (what Izmailov et al. diagnosed: classic R-hat on the
softmax outputs), the probability of the true class, and the centred logits. All R-hat values
here are rank-normalised split R-hat (Vehtari et al. 2021), stricter than the classic one.

The chains are the run folder ``--out/hmc`` (test set: the first ``--num-test`` digits test
rows), which ``bnn-ppl evaluate`` reads; ``--out/rhat.png`` holds the histograms.

    python examples/rhat.py
    python examples/rhat.py --num-chains 4 --num-samples 500 --width 100
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

import bnn_ppl as bp
from bnn_ppl.config import HMCConfig
from bnn_ppl.diagnostics.function_values import (
    CLASSIFICATION_QUANTITIES,
    PAPERS_QUANTITY,
    function_values,
)
from bnn_ppl.diagnostics.slow_values import describe_laggards, laggards
from bnn_ppl.inference import fit_run
from bnn_ppl.plots import rhat_histograms, save_figure


def main(args: argparse.Namespace) -> None:
    data = bp.data.load("digits").head(args.max_train)
    data = data._replace(x_test=data.x_test[: args.num_test], y_test=data.y_test[: args.num_test])
    model = bp.BNN(bp.models.MLP(hidden=(args.width,), out=data.num_classes),
                   prior=bp.priors.Normal(args.prior_scale),
                   likelihood=bp.likelihoods.Categorical())  # fmt: skip
    config = HMCConfig(num_warmup=args.num_warmup, num_samples=args.num_samples,
                       num_chains=args.num_chains)  # fmt: skip
    post, record = fit_run(os.path.join(args.out, "hmc"), model, data, config,
                           jax.random.key(args.seed),
                           options={"width": args.width, "prior_scale": args.prior_scale})
    weights = bp.diagnostics.weight_space(post.samples)
    # the papers' quantity is kept: its values also give the slow values below
    probs = function_values(model, post.samples, data.x_test, PAPERS_QUANTITY)
    functions = {q: bp.diagnostics.convergence({"predictive": probs}) if q == PAPERS_QUANTITY
                 else bp.diagnostics.function_space(model, post.samples, data.x_test, quantity=q,
                                                    y=data.y_test)
                 for q in CLASSIFICATION_QUANTITIES}  # fmt: skip

    print(f"digits, MLP(hidden=({args.width},)), {args.num_chains} chains x "
          f"{args.num_samples} draws; predictions on {len(data.x_test)} test inputs")
    print(f"{'space':<32}{'quantities':>12}{'R-hat > 1.01':>14}{'R-hat > 1.1':>13}"
          f"{'median R-hat':>14}")
    rows = [("weight space", weights)]
    rows += [(f"function space: {q}" + (" (papers)" if q == PAPERS_QUANTITY else ""), conv)
             for q, conv in functions.items()]  # fmt: skip
    for name, conv in rows:
        r = conv.all_rhat()
        print(f"{name:<32}{r.size:>12}{conv.fraction_above(1.01):>14.1%}"
              f"{conv.fraction_above(1.1):>13.1%}{float(np.median(r)):>14.3f}")
    print(f"(papers: Izmailov et al. used classic R-hat on the softmax outputs, "
          f"{PAPERS_QUANTITY!r}; p_true is each row's probability of its label, centred_logits "
          "the logits minus their row mean)")
    # which probabilities fail, and is one chain the odd one out (elsewhere in function space)?
    print(f"slow values ({PAPERS_QUANTITY}): "
          f"{describe_laggards(laggards(probs), int(np.prod(probs.shape[2:])))}")
    print("\nweight space, per layer:")
    print(weights.table())
    print()
    for row in record["summary"]["chains"]:
        print(f"chain {row['chain']}: accept {row['accept_prob']:.3f}, "
              f"{row['divergences']} divergences, step size {row['step_size']:.2e}, "
              f"{row.get('num_steps', float('nan')):.1f} leapfrog steps")
    path = os.path.join(args.out, "rhat.png")
    spaces = {"weight space": weights, **{f"function space: {q}": c for q, c in functions.items()}}
    save_figure(rhat_histograms(spaces), path)
    print(f"wrote {path} and the run folder {args.out}/hmc")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--prior-scale", type=float, default=0.3)
    p.add_argument("--num-chains", type=int, default=4)
    p.add_argument("--num-warmup", type=int, default=200)
    p.add_argument("--num-samples", type=int, default=200)
    p.add_argument("--num-test", type=int, default=360, help="test inputs for function space")
    p.add_argument("--max-train", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/rhat")
    args = p.parse_args(argv)
    if args.num_chains < 2:
        p.error("--num-chains must be at least 2: R-hat compares chains")
    return args


if __name__ == "__main__":
    main(parse_args())
