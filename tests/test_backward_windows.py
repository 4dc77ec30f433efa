"""backward_windows: eager's backward windows per device, and the bounds on their length."""

from __future__ import annotations

import itertools
import math
import random

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from decomps import backward_windows, eager_rules
from decomps.size_conditions import host_tensors
from tests.common import backward_op, explicit_scale_cases, exporting, random_size_pairs, symbolic_sizes


class TestBackwardWindows(TestCase):
    def test_backward_windows(self, device):
        """Each input's window [lo(i), lo(i+1)) equals the outputs eager's backward sums into it.

        Windows are contiguous, so eager's count and sum of output positions per input pin
        them down.
        """
        cases = [(i, o, None) for i in range(1, 121) for o in range(1, 121)]
        cases += list(explicit_scale_cases()) + [(i, o, None) for i, o in random_size_pairs(100)]
        mismatches = []
        for exact in (False, True):
            rule = eager_rules.window_rule(torch.device(device), exact)
            for isize, osize, scale in cases:
                positions = torch.arange(osize, dtype=torch.float64, device=device)
                grads = torch.stack([torch.ones_like(positions), positions]).view(2, 1, osize)
                eager = backward_op(1, exact)(grads, [osize], [2, 1, isize], scale).cpu()
                lo = backward_windows.window_starts(isize, osize, scale, rule, device).cpu()
                o = torch.arange(osize, dtype=torch.float64)
                inside = (o >= lo[:-1, None]) & (o < lo[1:, None])
                ours = torch.stack([inside.sum(1).double(), (inside * o).sum(1)]).view(2, 1, isize)
                if not torch.equal(ours, eager):
                    mismatches.append((exact, isize, osize, scale))
                bound = backward_windows.window_bound(isize, osize, scale, rule)
                self.assertLessEqual(int((lo[1:] - lo[:-1]).max()), bound)
        self.assertEqual(mismatches, [])

    def test_symbolic_window_bound_covers_every_window(self, device):
        """The gather width of symbolic sizes below ``TIGHT_WINDOW_LIMIT`` is at least every
        window of eager's backward (window_starts is checked against eager above): ``r =
        ceil(osize / isize)`` (``ceil(scale)`` for an explicit scale) where
        ``ceil_ratio_bounds_windows`` says so, else ``r + 1``. All pairs to 150, random pairs to
        2**22, ratios just off an integer (``k * isize +- 1``, ``isize +- 1``), output sizes just
        below the limit, and ratios at the edge of the ``r`` condition.
        """
        rng = random.Random(3)
        limit = backward_windows.TIGHT_WINDOW_LIMIT
        margin = backward_windows.ROUNDING_MARGIN
        pairs = [(i, o) for i in range(1, 151) for o in range(1, 151)]
        pairs += [(rng.randint(1, 2**22), rng.randint(1, 2**22)) for _ in range(20)]
        for isize in (3, 7, 1000, 4095, 65537, 2**21 - 1):
            for k in (1, 2, 3, 5):
                pairs += [(isize, k * isize + d) for d in (-1, 1) if 0 < k * isize + d < limit]
        pairs += [(i, limit - 1) for i in (limit - 2, 2**22 + 1, 3 * 2**20 + 7, 2**21 - 3, 1 << 20)]
        # non-integer ratios whose CPU nearest-exact windows reach r + 1 (found by search)
        pairs += [(3590676, 7181336), (2676878, 5353755), (2735765, 8207292)]
        # the largest osize for which r alone is the bound, and the next one
        edge = [(i, k * i * margin // (margin + i)) for i in (5, 999, 2**16 + 1, 2**19 - 7, 2**21) for k in (1, 2, 3)]
        pairs += [(i, o + d) for i, o in edge for d in (0, 1) if o + d > 0]
        cases = [(i, o, None, -(-o // i)) for i, o in pairs]
        # explicit scales (on CPU only where osize <= isize * scale, else no bound), and scales at
        # the edge of the r condition
        explicit = list(explicit_scale_cases()) + [(i, round(i * 1.5), 1.5) for i in (5, 77, 2**20 + 3)]
        for i in (5, 999, 2**16 + 1, 2**19 - 7):
            for k in (1, 2, 3):
                scale = k * margin / (margin + i)
                explicit += [(i, math.floor(i * scale), scale), (i, math.floor(i * scale), math.nextafter(scale, k))]
        cases += [(i, o, s, math.ceil(s)) for i, o, s in explicit if device != "cpu" or o <= i * s]
        too_wide, ceil_bounds = [], 0
        for exact in (False, True):
            rule = eager_rules.window_rule(torch.device(device), exact)
            for isize, osize, scale, r in cases:
                lo = backward_windows.window_starts(isize, osize, scale, rule, device)
                widest = int((lo[1:] - lo[:-1]).max())
                bound = backward_windows.symbolic_window_bound(isize, osize, scale, rule)
                self.assertIn(bound, (r, r + 1), msg=(isize, osize, scale))
                ceil_bounds += bound == r
                if widest > bound:
                    too_wide.append((exact, isize, osize, scale, widest, bound))
        self.assertEqual(too_wide, [])
        self.assertGreater(ceil_bounds, len(cases) // 2)  # r alone is the bound for most pairs


class TestInjectiveWindows(TestCase):
    """Where no input receives two outputs (``injective_windows``), each output's input: the CPU
    forward map, CUDA's ``cuda_window_owner``; the plain store of the backward relies on both."""

    RULES = ("cuda", "cuda-exact", eager_rules.cpu_backward_rule(False), eager_rules.cpu_backward_rule(True))

    def _cases(self):
        pairs = [(i, o, None) for i in range(1, 61) for o in range(1, i + 2)]
        pairs += [(i, o, None) for i, o in random_size_pairs(100, seed=5) if o <= i]
        pairs += [(2345, 1234, None), (2456, 1345, None)]
        return pairs + [c for c in explicit_scale_cases() if c[0] <= 120]

    def test_static_sizes_hold_one_output_per_window(self):
        """True exactly where every window holds at most one output and they cover the outputs
        (and, for CUDA's owner estimate, ``isize < OWNER_SIZE_LIMIT``)."""
        taken = 0
        for (isize, osize, scale), rule in itertools.product(self._cases(), self.RULES):
            lo = backward_windows.window_starts(isize, osize, scale, rule, "cpu")
            cuda = rule in backward_windows.CUDA_RULES
            expected = int((lo[1:] - lo[:-1]).max()) <= 1 and int(lo[-1]) == osize
            expected = expected and not (cuda and isize >= backward_windows.OWNER_SIZE_LIMIT)
            self.assertEqual(backward_windows.injective_windows(isize, osize, scale, rule), expected,
                             msg=(isize, osize, scale, rule))
            taken += expected
        self.assertGreater(taken, 500)
        limit = backward_windows.OWNER_SIZE_LIMIT  # CUDA's owner estimate: isize below it
        self.assertFalse(backward_windows.injective_windows(limit, 5, None, "cuda"))
        self.assertTrue(backward_windows.injective_windows(limit, 5, None, eager_rules.cpu_backward_rule(True)))

    def test_owners_are_the_windows_inputs(self):
        """``owner(o)`` is the ``i`` with ``lo(i) <= o < lo(i + 1)``: CUDA's formula, in int64 and
        int32, and the CPU rules' forward map (their windows are its exact preimage)."""
        for (isize, osize, scale), rule in itertools.product(self._cases(), self.RULES):
            if not backward_windows.injective_windows(isize, osize, scale, rule):
                continue
            lo = backward_windows.window_starts(isize, osize, scale, rule, "cpu")
            o = torch.arange(osize)
            expected = torch.searchsorted(lo, o, right=True) - 1
            if rule in backward_windows.CUDA_RULES:
                for dtype in (torch.int64, torch.int32):
                    owner = backward_windows.cuda_window_owner(o.to(dtype), isize, osize, scale, rule == "cuda-exact")
                    self.assertEqual(owner.dtype, dtype)
                    self.assertEqual(owner.tolist(), expected.tolist(), msg=(isize, osize, scale, rule))
            else:
                owner = eager_rules.source_indices(isize, osize, scale, rule, "cpu")
                self.assertEqual(owner.tolist(), expected.tolist(), msg=(isize, osize, scale, rule))

    def test_symbolic_sizes(self):
        """A downsample's condition is a guard (``ceil_ratio_bounds_windows`` with ``r = 1``; on
        CUDA also ``isize < OWNER_SIZE_LIMIT``); an upsample adds none; CUDA's explicit scales
        never qualify (the last window may end early); while exporting only what is proved."""
        for rule in self.RULES:
            cuda = rule in backward_windows.CUDA_RULES
            env, (i, o) = symbolic_sizes(2345, 1234)
            self.assertTrue(backward_windows.injective_windows(i, o, None, rule))
            self.assertEqual(len(env.guards), 2 if cuda else 1, msg=rule)
            env, (i, o) = symbolic_sizes(1234, 2345)
            self.assertFalse(backward_windows.injective_windows(i, o, None, rule))
            self.assertEqual(env.guards, [])
            env, (i, o) = symbolic_sizes(100, 75)
            self.assertEqual(backward_windows.injective_windows(i, o, 0.75, rule), not cuda, msg=rule)
            env, (i, o) = symbolic_sizes(2345, 1234)
            with exporting():
                self.assertFalse(backward_windows.injective_windows(i, o, None, rule))


class TestCudaWindowDtype(TestCase):
    """CUDA's window starts may be int32 where ``i``, ``lo(i)`` and ``i * s`` stay below
    ``INT32_MAP_LIMIT``: for symbolic sizes under a guard where the example sizes meet it; the
    CPU rules keep int64."""

    LIMIT = eager_rules.INT32_MAP_LIMIT

    def test_static_sizes(self):
        dtype = backward_windows.cuda_window_dtype
        self.assertEqual(dtype(200, 300, None), torch.int32)
        self.assertEqual(dtype(self.LIMIT + 1, 5, None), torch.int64)
        self.assertEqual(dtype(5, self.LIMIT + 1, None), torch.int64)
        self.assertEqual(dtype(self.LIMIT // 4, 5, 4.0), torch.int32)  # i * 4 up to the limit
        self.assertEqual(dtype(self.LIMIT // 4 + 1, 5, 4.0), torch.int64)
        self.assertEqual(dtype(5, 5, 1e10), torch.int64)
        for rule in ("cuda", "cuda-exact", eager_rules.cpu_backward_rule(False)):
            lo = backward_windows.window_starts(200, 300, None, rule, "cpu", torch.int32)
            self.assertEqual(lo.dtype, torch.int64 if isinstance(rule, eager_rules.Rule) else torch.int32)

    def test_symbolic_sizes(self):
        env, (i, o) = symbolic_sizes(200, 300)
        self.assertEqual(backward_windows.cuda_window_dtype(i, o, None), torch.int32)
        self.assertEqual(len(env.guards), 2)
        env, (i, o) = symbolic_sizes(200, 300)
        with exporting():
            self.assertEqual(backward_windows.cuda_window_dtype(i, o, None), torch.int64)
        self.assertEqual(env.guards, [])

    def test_int32_starts_of_symbolic_sizes_are_eager_windows(self):
        """Traced once with symbolic sizes (int32), run at other sizes: the same starts as the
        static computation, which test_backward_windows checks against eager's CUDA backward."""
        for rule, scale in itertools.product(("cuda", "cuda-exact"), (None, 0.75, 3.5)):
            def f(x):
                dtype = backward_windows.cuda_window_dtype(x.shape[0], x.shape[1], scale)
                return backward_windows.window_starts(x.shape[0], x.shape[1], scale, rule, "cpu", dtype)

            graph = make_fx(f, tracing_mode="symbolic")(torch.empty(7, 11))
            for isize, osize in [(7, 11), (3, 2), (200, 300), (1234, 2345), (2345, 1234), (5, 10)]:
                lo = graph(torch.empty(isize, osize))
                self.assertEqual(lo.dtype, torch.int32)
                with host_tensors():
                    expected = backward_windows.window_starts(isize, osize, scale, rule, "cpu")
                self.assertEqual(lo.tolist(), expected.tolist(), msg=(rule, scale, isize, osize))


instantiate_device_type_tests(TestBackwardWindows, globals(), only_for=("cpu", "cuda"))


if __name__ == "__main__":
    run_tests()
