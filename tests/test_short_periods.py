"""short_periods: a period found or proved for a ratio reproduces eager's whole map."""

from __future__ import annotations

import itertools
import math
import random

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from decomps import backward_windows, eager_rules, short_periods
from tests.common import channels_last_kernel_input, generic_kernel_input


class TestShortPeriods(TestCase):
    def _period_rules(self, device, exact):
        """(forward rule, window rule) pairs of eager's kernels on this device."""
        rows = [generic_kernel_input(5, 7, None, torch.float32, device), generic_kernel_input(5, 7, None, torch.float64, device),
                channels_last_kernel_input(5, 7, None, torch.float32, device)]
        window = eager_rules.window_rule(torch.device(device), exact)
        return [(eager_rules.forward_rule(x, size, exact, scales), window) for x, size, scales in rows]

    def test_periods_reproduce_the_map(self, device):
        """A ``Period`` found for concrete sizes reproduces the whole forward map and all window
        starts (both equal eager's, tests above), and one is found for every pair with a
        non-integer ratio whose map repeats within the length allowed."""
        found = 0
        for exact in (False, True):
            for rule, window in self._period_rules(device, exact):
                for isize, osize in itertools.product(range(1, 49), repeat=2):
                    g = math.gcd(isize, osize)
                    p, q = isize // g, osize // g
                    src = eager_rules.source_indices(isize, osize, None, rule, device).cpu().tolist()
                    lo = backward_windows.window_starts(isize, osize, None, window, device).cpu().tolist()
                    periodic = min(p, q) > 1 and all(s == o // q * p + src[o % q] for o, s in enumerate(src))
                    period = short_periods.forward_period(isize, osize, None, rule, 8)
                    self.assertEqual(period is not None, periodic and q <= 8, msg=(isize, osize, rule))
                    if period is not None:
                        found += 1
                        self.assertEqual((period.inputs, period.outputs), (p, q))
                        self.assertEqual([o // q * p + period.table[o % q] for o in range(osize)], src)
                    periodic = min(p, q) > 1 and all(s == i // p * q + lo[i % p] for i, s in enumerate(lo))
                    period = short_periods.window_period(isize, osize, None, window, 8)
                    self.assertEqual(period is not None, periodic and p <= 8, msg=(isize, osize, window))
                    if period is not None:
                        found += 1
                        self.assertEqual(period.table[-1], q)
                        self.assertEqual([i // p * q + period.table[i % p] for i in range(isize + 1)], lo)
        self.assertGreater(found, 1000)

    def test_ratio_period_holds_for_every_size_within_its_limit(self, device):
        """``ratio_period`` (symbolic sizes) proves a period for all sizes ``(m p, m q)`` up to
        its limit from one evaluation at the largest pair: checked against the map computed for
        every ``m`` to 100, a random one and the limit itself. Where the limit is below the size
        cap, the map at ``m = limit + 2`` breaks the period, so the limit is at most one short
        (at ``limit + 1`` the break can fall on the last start, which the end clamp fixes).
        """
        rng = random.Random(5)
        broken_after_limit = 0
        for exact, (p, q) in itertools.product((False, True), [(2, 3), (3, 2), (4, 7), (7, 4), (5, 6)]):
            for (rule, window), scale in itertools.product(self._period_rules(device, exact), (None, q / p)):
                for backward, r in ((False, rule), (True, window)):
                    period, periods = short_periods.ratio_period(p, q, scale, r, backward)
                    cap = short_periods.PERIOD_SIZE_LIMIT // max(p, q)
                    self.assertLessEqual(periods, cap)
                    ms = sorted({*range(1, min(periods, 100) + 1), periods, rng.randint(1, max(periods, 1))})
                    if periods + 2 <= cap:
                        ms.append(periods + 2)
                    for m in ms:
                        if m < 1:
                            continue
                        if backward:
                            values = backward_windows.window_starts(m * p, m * q, scale, r, device).cpu()
                            k = torch.arange(m * p + 1)
                            expanded = k // p * q + torch.tensor(period.table)[k % p]
                        else:
                            values = eager_rules.source_indices(m * p, m * q, scale, r, device).cpu()
                            k = torch.arange(m * q)
                            expanded = k // q * p + torch.tensor(period.table)[k % q]
                        follows = torch.equal(values, expanded)
                        self.assertEqual(follows, m <= periods, msg=(p, q, scale, r, backward, m, periods))
                        broken_after_limit += m > periods
        if device != "cpu":
            self.assertGreater(broken_after_limit, 0)  # CUDA's windows break some periods early


instantiate_device_type_tests(TestShortPeriods, globals(), only_for=("cpu", "cuda"))


if __name__ == "__main__":
    run_tests()
