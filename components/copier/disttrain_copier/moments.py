"""Per-feature moments (count, mean, variance, min, max), accumulated in batches and merged across splits: the
numeric statistics of validation.py (tables, arrays) and typed_validation.py (typed tables' number columns)."""

import numpy as np


class FeatureMoments:
    """Per feature (a table's column; an array's element of the last axis): count, mean, population
    variance, min and max, accumulated example by example. Sums are taken around the first example seen
    (a shift near the data keeps the variance's subtraction exact to float64 rounding); splits merge with
    Chan's pairwise formula."""

    def __init__(self):
        self.count, self.shift = 0, None

    def add(self, x):
        values = np.asarray(x, dtype=np.float64)
        values = values.reshape(-1, values.shape[-1] if values.ndim else 1)
        if self.shift is None:
            self.shift = values[0].copy()
            width = len(self.shift)
            self.sum, self.sumsq = np.zeros(width), np.zeros(width)
            self.min, self.max = np.full(width, np.inf), np.full(width, -np.inf)
        d = values - self.shift
        self.sum += d.sum(axis=0)
        self.sumsq += np.einsum("ij,ij->j", d, d)
        self.count += len(values)
        np.minimum(self.min, values.min(axis=0), out=self.min)
        np.maximum(self.max, values.max(axis=0), out=self.max)

    def moments(self):
        """(count, mean, M2 = sum of squared deviations, min, max), or None before any example."""
        if not self.count:
            return None
        mean_d = self.sum / self.count
        m2 = np.maximum(self.sumsq - self.sum * mean_d, 0.0)
        return self.count, self.shift + mean_d, m2, self.min.copy(), self.max.copy()

    @staticmethod
    def merge(parts):
        """The moments of several splits together (Chan et al.'s parallel update)."""
        out = None
        for part in filter(None, parts):
            if out is None:
                out = part
                continue
            n_a, mean_a, m2_a, lo_a, hi_a = out
            n_b, mean_b, m2_b, lo_b, hi_b = part
            n = n_a + n_b
            delta = mean_b - mean_a
            out = (
                n,
                mean_a + delta * (n_b / n),
                m2_a + m2_b + delta * delta * (n_a * n_b / n),
                np.minimum(lo_a, lo_b),
                np.maximum(hi_a, hi_b),
            )
        return out

    @staticmethod
    def to_json(moments):
        """{"mean", "variance" (population), "min", "max"}: lists, one value per feature."""
        if moments is None:
            return None
        n, mean, m2, lo, hi = moments
        return {"mean": mean.tolist(), "variance": (m2 / n).tolist(), "min": lo.tolist(), "max": hi.tolist()}
