"""Imported at start-up by the test scripts run under Triton's CPU interpreter (``conftest.interpreter_env``): the
interpreter's ``tl.dot`` (``numpy.matmul``) computes each row of a block alone, as a GPU kernel's rows are computed,
so that a test that a row's bits do not depend on the other rows of its block tests the kernel, not the host's BLAS
(whose matrix products can give a row other bits by its place in the block: OpenBLAS on AMD EPYC does)."""

import numpy as np

_matmul = np.matmul


def _rows_alone(a, b, *args, **kwargs):
    """``numpy.matmul`` one row of ``a`` at a time (2-D ``a`` and ``b``)."""
    if getattr(a, "ndim", 0) == 2 and getattr(b, "ndim", 0) == 2 and a.shape[0] > 1:
        return np.concatenate([_matmul(a[i:i + 1], b, *args, **kwargs) for i in range(a.shape[0])])
    return _matmul(a, b, *args, **kwargs)


np.matmul = _rows_alone
