"""What the stages that spend a privacy budget agree on: the copier's private vocabulary and the trainer's
DP-SGD (and their sum, when both run on the same training split)."""


def delta_problem(what, delta, training_examples):
    """Why `delta` is too large for `training_examples` examples (one line naming it as `what`), or None.
    δ is the chance the guarantee fails outright: at 1/n or above, publishing one example whole meets it."""
    if delta >= 1 / training_examples:
        return (
            f"{what} must be below 1/n = {1 / training_examples:.3g} (n = {training_examples} training examples); "
            "1/(10 n) or smaller is usual"
        )
    return None
