"""Index parity: the package's source index and backward windows equal eager's, per device."""

from __future__ import annotations

import itertools
import math
import random

import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from torch.fx.experimental.proxy_tensor import make_fx

from decomps import source_index
from tests.common import TABLE, aten, backward_op, forward_op

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
                rule = source_index.forward_rule(x, out_size, exact, scales)
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

    def test_symbolic_window_bound_covers_every_window(self, device):
        """The gather width of symbolic sizes below ``TIGHT_WINDOW_LIMIT`` is at least every
        window of eager's backward (window_starts is checked against eager above): ``r =
        ceil(osize / isize)`` (``ceil(scale)`` for an explicit scale) where
        ``ceil_ratio_bounds_windows`` says so, else ``r + 1``. All pairs to 150, random pairs to
        2**22, ratios just off an integer (``k * isize +- 1``, ``isize +- 1``), output sizes just
        below the limit, and ratios at the edge of the ``r`` condition.
        """
        rng = random.Random(3)
        limit = source_index.TIGHT_WINDOW_LIMIT
        margin = source_index.ROUNDING_MARGIN
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
        explicit = list(_explicit_cases()) + [(i, round(i * 1.5), 1.5) for i in (5, 77, 2**20 + 3)]
        for i in (5, 999, 2**16 + 1, 2**19 - 7):
            for k in (1, 2, 3):
                scale = k * margin / (margin + i)
                explicit += [(i, math.floor(i * scale), scale), (i, math.floor(i * scale), math.nextafter(scale, k))]
        cases += [(i, o, s, math.ceil(s)) for i, o, s in explicit if device != "cpu" or o <= i * s]
        too_wide, ceil_bounds = [], 0
        for exact in (False, True):
            rule = source_index.window_rule(torch.device(device), exact)
            for isize, osize, scale, r in cases:
                lo = source_index.window_starts(isize, osize, scale, rule, device)
                widest = int((lo[1:] - lo[:-1]).max())
                bound = source_index.symbolic_window_bound(isize, osize, scale, rule)
                self.assertIn(bound, (r, r + 1), msg=(isize, osize, scale))
                ceil_bounds += bound == r
                if widest > bound:
                    too_wide.append((exact, isize, osize, scale, widest, bound))
        self.assertEqual(too_wide, [])
        self.assertGreater(ceil_bounds, len(cases) // 2)  # r alone is the bound for most pairs

    def _period_rules(self, device, exact):
        """(forward rule, window rule) pairs of eager's kernels on this device."""
        rows = [_rows(5, 7, None, torch.float32, device), _rows(5, 7, None, torch.float64, device),
                _channels_last_rows(5, 7, None, torch.float32, device)]
        window = source_index.window_rule(torch.device(device), exact)
        return [(source_index.forward_rule(x, size, exact, scales), window) for x, size, scales in rows]

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
                    src = source_index.source_indices(isize, osize, None, rule, device).cpu().tolist()
                    lo = source_index.window_starts(isize, osize, None, window, device).cpu().tolist()
                    periodic = min(p, q) > 1 and all(s == o // q * p + src[o % q] for o, s in enumerate(src))
                    period = source_index.forward_period(isize, osize, None, rule, 8)
                    self.assertEqual(period is not None, periodic and q <= 8, msg=(isize, osize, rule))
                    if period is not None:
                        found += 1
                        self.assertEqual((period.inputs, period.outputs), (p, q))
                        self.assertEqual([o // q * p + period.table[o % q] for o in range(osize)], src)
                    periodic = min(p, q) > 1 and all(s == i // p * q + lo[i % p] for i, s in enumerate(lo))
                    period = source_index.window_period(isize, osize, None, window, 8)
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
                    period, periods = source_index.ratio_period(p, q, scale, r, backward)
                    cap = source_index.PERIOD_SIZE_LIMIT // max(p, q)
                    self.assertLessEqual(periods, cap)
                    ms = sorted({*range(1, min(periods, 100) + 1), periods, rng.randint(1, max(periods, 1))})
                    if periods + 2 <= cap:
                        ms.append(periods + 2)
                    for m in ms:
                        if m < 1:
                            continue
                        if backward:
                            values = source_index.window_starts(m * p, m * q, scale, r, device).cpu()
                            k = torch.arange(m * p + 1)
                            expanded = k // p * q + torch.tensor(period.table)[k % p]
                        else:
                            values = source_index.source_indices(m * p, m * q, scale, r, device).cpu()
                            k = torch.arange(m * q)
                            expanded = k // q * p + torch.tensor(period.table)[k % q]
                        follows = torch.equal(values, expanded)
                        self.assertEqual(follows, m <= periods, msg=(p, q, scale, r, backward, m, periods))
                        broken_after_limit += m > periods
        if device != "cpu":
            self.assertGreater(broken_after_limit, 0)  # CUDA's windows break some periods early

    def test_no_float_round_trip_in_symbolic_graphs(self, device):
        """No float64 -> float32 -> float64 convert chain in any decomposition's symbolic graph.

        Inductor (torch 2.11 ``pointless_convert``) folds such a chain and with it the float32
        rounding the chain stands for; float32 roundings must be float32 ops or single converts.
        """
        floats = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
        for exact, rank in itertools.product((False, True), (1, 2)):
            for channels_last in (False, True) if rank == 2 else (False,):
                x = torch.randn((1, 5, 7, 9)[: rank + 2], device=device)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                osize = [13, 4][:rank]
                for op, args in (
                    (forward_op(rank, exact), (x, osize)),
                    (forward_op(rank, exact), (x, osize, *[0.7] * rank)),
                    (backward_op(rank, exact), (torch.randn(*x.shape[:2], *osize, device=device), osize, list(x.shape))),
                ):
                    graph = make_fx(
                        lambda *a, op=op: op(*a), decomposition_table=TABLE, tracing_mode="symbolic"
                    )(*args).graph
                    for node in graph.nodes:
                        if node.target not in (aten._to_copy.default, torch.ops.prims.convert_element_type.default):
                            continue
                        source = node.args[0]
                        if not (isinstance(source, torch.fx.Node) and source.target == node.target):
                            continue
                        inner = source.args[0].meta["val"].dtype, source.meta["val"].dtype
                        outer = node.meta["val"].dtype
                        lossy_round_trip = inner[0] in floats and inner[1] in floats and outer in floats and (
                            inner[1].itemsize < min(inner[0].itemsize, outer.itemsize))
                        self.assertFalse(lossy_round_trip, msg=f"{op} {inner} -> {outer}:\n{graph}")


class TestCpuKernelChoice(TestCase):
    def test_cpu_kernels_agree_for_nearest_without_scale(self):
        """forward_rule decides nothing (and guards nothing) for nearest without an explicit scale
        on a non-float64 input, because eager's two CPU kernels read the same inputs there; for
        float64 they do not. Same sizes through both kernels: generic (contiguous, 2 channels,
        oh + ow > 128) and channels-last (4 channels-last channels)."""
        pairs = [(i, o) for i in range(1, 81) for o in range(1, 81)] + _random_pairs(50, seed=2)
        differ = {}
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.float64):
            differ[dtype] = 0
            for isize, osize in pairs:
                v = torch.arange(isize)
                rows = torch.stack([v // 64, v % 64]).to(dtype)  # the index, exact in every dtype
                generic = rows.view(1, 2, isize, 1)
                channels_last = torch.cat([rows, rows]).view(1, 4, isize, 1)
                channels_last = channels_last.contiguous(memory_format=torch.channels_last)
                a = aten.upsample_nearest2d.default(generic, [osize, 200])[0, :, :, 0]
                b = aten.upsample_nearest2d.default(channels_last, [osize, 200])[0, :2, :, 0]
                differ[dtype] += not torch.equal(a, b)
            if dtype != torch.float64:
                for x in (generic, channels_last):
                    rule = source_index.forward_rule(x, [osize, 200], False, [None, None])
                    self.assertEqual(rule, source_index.Rule(exact=False))
        self.assertEqual([d for d, n in differ.items() if n], [torch.float64])


instantiate_device_type_tests(TestSourceIndex, globals(), only_for=("cpu", "cuda"))

if __name__ == "__main__":
    run_tests()
