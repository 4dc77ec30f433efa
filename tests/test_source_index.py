"""Index parity: the package's source index and backward windows equal eager's, per device."""

from __future__ import annotations

import random

import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from decomps import source_index
from tests.common import aten, backward_op, forward_op

GRID = range(1, 301)
EXPLICIT_SCALES = (0.6, 1.7, 1 / 3, 0.5, 25.0, 2.0000001, 7 / 3, 0.75)


def _random_pairs(n: int, seed: int = 0):
    rng = random.Random(seed)
    return [(rng.randint(1, 4096), rng.randint(1, 4096)) for _ in range(n)]


def _explicit_cases():
    """(isize, osize, scale): osize as .vec derives it, plus one size off that."""
    for scale in EXPLICIT_SCALES:
        for isize in range(1, 301, 7):
            osize = int(isize * scale)
            for o in {osize, osize + 1}:
                if o > 0:
                    yield isize, o, scale


def _rows(isize, osize, scale, dtype, device):
    # 1d: the generic CPU kernel (float32 or float64 arithmetic by dtype), CUDA's only rule.
    x = torch.arange(isize, dtype=dtype, device=device).view(1, 1, isize)
    return x, [osize], [scale]

def _channels_last_rows(isize, osize, scale, dtype, device):
    # 2d, 4 channels-last channels: CPU's channels-last kernel (the header helpers) and
    # CUDA's 2d kernel (identity along equal sizes).
    x = torch.arange(isize, dtype=dtype, device=device).view(1, 1, 1, isize)
    x = x.expand(1, 4, 1, isize).contiguous(memory_format=torch.channels_last)
    return x, [1, osize], [None, scale]



class TestSourceIndex(TestCase):
    def _check_forward(self, device, dtype, make_input, cases):
        """Compares source_index with the index eager reads, encoded in the input's values."""
        mismatches = []
        for exact in (False, True):
            for isize, osize, scale in cases:
                x, out_size, scales = make_input(isize, osize, scale, dtype, device)
                op = forward_op(x.dim() - 2, exact)
                eager = op(x, out_size, *scales).reshape(-1)[: osize].long().cpu()
                rule = source_index.forward_rule(x, out_size, exact)
                ours = source_index.source_indices(isize, osize, scale, rule, device).cpu()
                if not torch.equal(ours, eager):
                    mismatches.append((exact, isize, osize, scale, rule))
        self.assertEqual(mismatches, [])

    @dtypes(torch.float32, torch.float64)
    def test_forward_grid(self, device, dtype):
        cases = [(i, o, None) for i in GRID for o in GRID]
        self._check_forward(device, dtype, _rows, cases)

    @dtypes(torch.float32, torch.float64)
    def test_forward_explicit_scales_and_large_sizes(self, device, dtype):
        cases = list(_explicit_cases()) + [(i, o, None) for i, o in _random_pairs(300)]
        cases += [(i, o, o / i) for i, o in _random_pairs(100, seed=1)]
        self._check_forward(device, dtype, _rows, cases)

    def test_forward_channels_last_kernel(self, device):
        cases = [(i, o, None) for i in range(1, 121) for o in range(1, 121)]
        cases += list(_explicit_cases()) + [(i, o, None) for i, o in _random_pairs(100)]
        self._check_forward(device, torch.float32, _channels_last_rows, cases)

    def test_backward_windows(self, device):
        """Each input's window [lo(i), lo(i+1)) equals the outputs eager's backward sums into it.

        Windows are contiguous, so eager's count and sum of output positions per input pin
        them down.
        """
        cases = [(i, o, None) for i in range(1, 121) for o in range(1, 121)]
        cases += list(_explicit_cases()) + [(i, o, None) for i, o in _random_pairs(100)]
        mismatches = []
        for exact in (False, True):
            rule = source_index.window_rule(torch.device(device), exact)
            for isize, osize, scale in cases:
                positions = torch.arange(osize, dtype=torch.float64, device=device)
                grads = torch.stack([torch.ones_like(positions), positions]).view(2, 1, osize)
                eager = backward_op(1, exact)(grads, [osize], [2, 1, isize], scale).cpu()
                lo = source_index.window_starts(isize, osize, scale, rule, device).cpu()
                o = torch.arange(osize, dtype=torch.float64)
                inside = (o >= lo[:-1, None]) & (o < lo[1:, None])
                ours = torch.stack([inside.sum(1).double(), (inside * o).sum(1)]).view(2, 1, isize)
                if not torch.equal(ours, eager):
                    mismatches.append((exact, isize, osize, scale))
                bound = source_index.window_bound(isize, osize, scale, rule)
                self.assertLessEqual(int((lo[1:] - lo[:-1]).max()), bound)
        self.assertEqual(mismatches, [])


instantiate_device_type_tests(TestSourceIndex, globals(), only_for=("cpu", "cuda"))

if __name__ == "__main__":
    run_tests()
