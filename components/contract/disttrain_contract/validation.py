"""The validation split: examples carved from training data, never from the held-out test split.

One seeded carve for every stage that needs one: the sweep scores its trials on the training
shards' carve (disttrain_sweep.split), and a trainer with --validation-fraction holds its own
shard's carve out of training, so that the aggregator's `--combine best` can rank the worker
models without ever looking at the held-out split (which stays an honest final estimate).
"""

import numpy as np

from disttrain_contract.errors import ContractError


def carve(n_examples, fraction, seed):
    """(train indices, validation indices), each sorted, disjoint, together 0..n-1."""
    if not 0 < fraction < 1:
        raise ContractError(f"--validation-fraction must be between 0 and 1, not {fraction}")
    n_validation = int(round(n_examples * fraction))
    if not 1 <= n_validation < n_examples:
        raise ContractError(f"{n_examples} training examples are too few for a validation split of {fraction:g}")
    order = np.random.default_rng(seed).permutation(n_examples)
    return np.sort(order[n_validation:]), np.sort(order[:n_validation])
