"""eager_rules: the forward map of every eager kernel equals the index eager reads, per device."""

from __future__ import annotations

import itertools

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from decomps import eager_rules, size_conditions
from tests.common import (
    INDEX_GRID,
    TABLE,
    aten,
    backward_op,
    channels_last_kernel_input,
    explicit_scale_cases,
    exporting,
    forward_op,
    generic_kernel_input,
    random_size_pairs,
    symbolic_sizes,
)


class TestEagerRules(TestCase):
    def _check_forward(self, device, dtype, make_input, cases):
        """Compares eager_rules.source_index with the index eager reads, encoded in the input's values."""
        mismatches = []
        for exact in (False, True):
            for isize, osize, scale in cases:
                x, out_size, scales = make_input(isize, osize, scale, dtype, device)
                op = forward_op(x.dim() - 2, exact)
                eager = op(x, out_size, *scales).reshape(-1)[: osize].long().cpu()
                rule = eager_rules.forward_rule(x, out_size, exact, scales)
                ours = eager_rules.source_indices(isize, osize, scale, rule, device).cpu()
                if not torch.equal(ours, eager):
                    mismatches.append((exact, isize, osize, scale, rule))
        self.assertEqual(mismatches, [])

    @dtypes(torch.float32, torch.float64)
    def test_forward_grid(self, device, dtype):
        cases = [(i, o, None) for i in INDEX_GRID for o in INDEX_GRID]
        self._check_forward(device, dtype, generic_kernel_input, cases)

    @dtypes(torch.float32, torch.float64)
    def test_forward_explicit_scales_and_large_sizes(self, device, dtype):
        cases = list(explicit_scale_cases()) + [(i, o, None) for i, o in random_size_pairs(300)]
        cases += [(i, o, o / i) for i, o in random_size_pairs(100, seed=1)]
        self._check_forward(device, dtype, generic_kernel_input, cases)

    def test_forward_channels_last_kernel(self, device):
        cases = [(i, o, None) for i in range(1, 121) for o in range(1, 121)]
        cases += list(explicit_scale_cases()) + [(i, o, None) for i, o in random_size_pairs(100)]
        self._check_forward(device, torch.float32, channels_last_kernel_input, cases)

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


class TestFloat32Centres(TestCase):
    """CUDA's nearest-exact index ``floorf((o + 0.5) * scale)`` is a double product rounded to
    float; below ``FLOAT32_EXACT_CENTRES`` output positions it is one float32 product."""

    RULE = eager_rules.Rule(exact=True)

    def _scales(self):
        g = torch.Generator().manual_seed(0)
        fixed = [0.5, 1 / 3, 0.7, 1.5, 2.0, 1234 / 2345, 2345 / 1234, 200 / 300, 1e-3, 123.456]
        scales = [eager_rules.round_to_float32(s) for s in fixed]
        scales += torch.rand(40, generator=g, dtype=torch.float64).mul(4).to(torch.float32).tolist()
        return scales

    def test_float32_product_equals_the_double_product_below_the_bound(self):
        g = torch.Generator().manual_seed(1)
        bound = eager_rules.FLOAT32_EXACT_CENTRES
        o = torch.cat([torch.arange(4096), torch.randint(0, bound, (100000,), generator=g), torch.arange(bound - 4096, bound)])
        for scale in self._scales():
            for s in (scale, torch.tensor(scale, dtype=torch.float32)):  # static and symbolic forms
                double = eager_rules.raw_source_index(o, s, self.RULE)
                single = eager_rules.raw_source_index(o, s, self.RULE, in_float32=True)
                self.assertTrue(torch.equal(double, single), msg=f"scale {scale}")

    def test_the_bound_is_needed(self):
        # 2**23 + 2.5 rounds to 2**23 + 2 in float32: 0.75 times it is 6291457.5, where the double
        # product 6291457.875 rounds to 6291458.0
        o = torch.tensor([eager_rules.FLOAT32_EXACT_CENTRES + 2])
        double = eager_rules.raw_source_index(o, 0.75, self.RULE)
        single = eager_rules.raw_source_index(o, 0.75, self.RULE, in_float32=True)
        self.assertEqual((double.item(), single.item()), (6291458, 6291457))

    def test_which_rules_and_sizes(self):
        bound = eager_rules.FLOAT32_EXACT_CENTRES
        self.assertTrue(eager_rules.float32_centres(bound, self.RULE))
        self.assertFalse(eager_rules.float32_centres(bound + 1, self.RULE))
        self.assertFalse(eager_rules.float32_centres(10, eager_rules.Rule(exact=False)))
        self.assertFalse(eager_rules.float32_centres(10, eager_rules.Rule(exact=True, double=True)))
        cpu_exact = eager_rules.Rule(exact=True, centre_shift=True)
        self.assertFalse(eager_rules.float32_centres(10, cpu_exact))


class TestStaticIndexForm(TestCase):
    """Static sizes whose map stays below the input size drop the clamp and index in 32 bits,
    as Inductor's own lowering does; maps that need the clamp (an explicit scale that reads past
    the input) keep it. The forward grids above compare both forms with eager."""

    RULE = eager_rules.Rule(exact=False)

    def _graph(self, isize, osize, scale):
        return make_fx(lambda: eager_rules.source_indices(isize, osize, scale, self.RULE, "cpu"))().graph

    def test_in_range_maps_drop_the_clamp(self):
        for isize, osize, scale in [(200, 300, None), (5, 9, None), (9, 5, None), (200, 300, 1.5), (2345, 1234, None)]:
            graph = str(self._graph(isize, osize, scale))
            self.assertNotIn("clamp_max", graph)
            self.assertIn("dtype: torch.int32", graph)

    def test_maps_past_the_input_keep_the_clamp(self):
        # scale 0.5 reads input 2 * o: past the input from o = 3
        graph = str(self._graph(5, 9, 0.5))
        self.assertIn("clamp_max", graph)
        self.assertNotIn("torch.int32", graph)
        self.assertFalse(eager_rules._static_in_range(5, 9, 2.0, self.RULE, False))
        self.assertTrue(eager_rules._static_in_range(5, 9, eager_rules.round_to_float32(5 / 9), self.RULE, False))
        # products past float32's range or not finite, and rules with float64 arithmetic: the clamp
        for scale in (float("inf"), 3e38):
            self.assertFalse(eager_rules._static_in_range(5, 9, scale, self.RULE, False))
        for rule in (eager_rules.Rule(exact=True), eager_rules.Rule(exact=False, double=True)):
            self.assertFalse(eager_rules._static_in_range(5, 9, 0.5, rule, False))


class TestSymbolicUnclampedMaps(TestCase):
    """Symbolic sizes drop the clamp under a guard where ``unclamped_in_range`` holds for the
    example sizes (no guard where it does not, a proof while exporting); wherever the condition
    holds, the map without the clamp stays below the input size."""

    RULES = [eager_rules.Rule(exact=False), eager_rules.Rule(exact=True)]

    def _last_index(self, isize, osize, scale, rule):
        """The unclamped map at the last output position, for concrete sizes."""
        s = eager_rules.forward_scale(isize, osize, scale, rule.double)
        o = torch.tensor([osize - 1])
        return eager_rules.raw_source_index(o, s, rule, in_float32=rule.exact).item()

    def test_condition_implies_the_map_stays_in_range(self):
        limit = eager_rules.UNCLAMPED_OSIZE_LIMIT
        g = torch.Generator().manual_seed(0)
        pairs = [(i, o) for o in (limit - 1, limit) for i in range(o - 40, o + 40)]
        pairs += [(int(i), int(o)) for i, o in torch.randint(1, limit + 1, (2000, 2), generator=g)]
        checked = 0
        for rule, (isize, osize) in itertools.product(self.RULES, pairs):
            for scale in (None, isize / osize, (isize + 0.5) / osize, float(osize) / isize):
                scale = None if scale is None else 1 / scale  # the op's scale: output / input
                if eager_rules.unclamped_in_range(isize, osize, scale, rule, rule.exact):
                    checked += 1
                    self.assertLess(self._last_index(isize, osize, scale, rule), isize,
                                    msg=(rule, isize, osize, scale))
        self.assertGreater(checked, 10000)
        # a scale that reads past the input fails it (the clamp is needed there)
        self.assertGreaterEqual(self._last_index(5, 9, 0.5, self.RULES[0]), 5)
        self.assertFalse(eager_rules.unclamped_in_range(5, 9, 0.5, self.RULES[0], False))
        self.assertFalse(eager_rules.unclamped_in_range(200, limit + 1, None, self.RULES[0], False))
        for rule in (eager_rules.Rule(exact=False, double=True), eager_rules.Rule(exact=True, centre_shift=True)):
            self.assertFalse(eager_rules.unclamped_in_range(200, 300, None, rule, False))
        self.assertFalse(eager_rules.unclamped_in_range(200, 300, None, self.RULES[1], False))  # centres in float64

    def _graph(self, scale, example):
        def f(x):
            isize, osize = x.shape
            return eager_rules.source_index(torch.arange(osize, dtype=torch.int64), isize, osize, scale, self.RULES[0])

        return make_fx(f, tracing_mode="symbolic")(torch.empty(example))

    def test_traced_maps_without_the_clamp_are_eager_maps(self):
        for scale, example in ((None, (7, 11)), (1.5, (8, 12)), (0.75, (12, 9))):
            graph = self._graph(scale, example)
            self.assertNotIn("clamp_max", str(graph.graph), msg=scale)
            for isize, osize in [(7, 11), (3, 2), (200, 300), (1234, 2345), (6, 9), (12, 9), (40, 30)]:
                if scale is not None and not eager_rules.unclamped_in_range(isize, osize, scale, self.RULES[0], False):
                    continue  # sizes the guard sends to another graph
                expected = eager_rules.static_source_indices(isize, osize, scale, self.RULES[0])
                self.assertEqual(graph(torch.empty(isize, osize)).tolist(), expected, msg=(scale, isize, osize))

    def test_guard_where_the_example_meets_it(self):
        limit = eager_rules.UNCLAMPED_OSIZE_LIMIT
        rule = self.RULES[0]
        env, (i, o) = symbolic_sizes(200, 300)
        self.assertTrue(size_conditions.holds_where_taken(eager_rules.unclamped_in_range(i, o, None, rule, False)))
        self.assertEqual([g.expr for g in env.guards], [o.node.expr <= limit])
        env, (i, o) = symbolic_sizes(200, limit + 1)
        self.assertFalse(size_conditions.holds_where_taken(eager_rules.unclamped_in_range(i, o, None, rule, False)))
        self.assertEqual(env.guards, [])  # the clamped map serves every size: nothing to recompile
        env, (i, o) = symbolic_sizes(5, 9)
        self.assertFalse(size_conditions.holds_where_taken(eager_rules.unclamped_in_range(i, o, 0.5, rule, False)))
        self.assertEqual(env.guards, [])
        env, (i, o) = symbolic_sizes(200, 300)
        with exporting():
            self.assertFalse(size_conditions.holds_where_taken(eager_rules.unclamped_in_range(i, o, None, rule, False)))
        self.assertEqual(env.guards, [])


class TestSpecialCasesOfScaledSizes(TestCase):
    """The header's special cases (``osize == isize``, ``osize == 2 * isize``) select at run time
    for symbolic sizes, except where the output size comes from a scale factor that rules them
    out (``size_conditions.scaled_size_differs``); either way the map is eager's."""

    RULE = eager_rules.Rule(exact=False, header_special=True)

    def _map(self, scale, from_scale):
        def f(x):
            isize = x.shape[0]
            osize = size_conditions.scaled_size(isize, scale) if from_scale else x.shape[1]
            return eager_rules.source_indices(isize, osize, scale, self.RULE, "cpu")

        return make_fx(f, tracing_mode="symbolic")

    def test_scale_factors_that_rule_them_out_drop_the_selection(self):
        for scale, from_scale, tests in [(1.5, True, 0), (2.5, True, 0), (1.2, True, 1), (1.5, False, 2)]:
            x = torch.empty(7, int(7 * scale))
            graph = self._map(scale, from_scale)(x)
            self.assertEqual(sum(n.target == aten.eq.Scalar for n in graph.graph.nodes), tests, msg=(scale, from_scale))
            for isize in (2, 3, 4, 7, 50):
                osize = int(isize * scale)
                expected = eager_rules.static_source_indices(isize, osize, scale, self.RULE)
                self.assertEqual(graph(torch.empty(isize, osize)).tolist(), expected, msg=(scale, isize))


class TestMapDtype(TestCase):
    """A dim's map is int32 where its values (``o < osize``, ``src(o)`` up to about
    ``osize / scale``) stay below ``INT32_MAP_LIMIT``: for symbolic sizes under a guard where the
    example sizes meet it, none where they do not, a proof while exporting."""

    LIMIT = eager_rules.INT32_MAP_LIMIT

    def test_static_sizes(self):
        for isize, osize, scale, dtype in [
            (200, 300, None, torch.int32),
            (self.LIMIT, self.LIMIT, None, torch.int32),
            (self.LIMIT + 1, 5, None, torch.int64),
            (5, self.LIMIT + 1, None, torch.int64),
            (5, self.LIMIT // 2, 0.5, torch.int32),  # src(o) = 2 o
            (5, self.LIMIT // 2 + 1, 0.5, torch.int64),
            (5, 5, 1e-9, torch.int64),  # src(o) = 1e9 o
            (5, 5, -1.0, torch.int32),  # not explicit: from the sizes
        ]:
            self.assertEqual(eager_rules.map_dtype(isize, osize, scale), dtype, msg=(isize, osize, scale))

    def test_symbolic_sizes_guard_where_the_example_fits(self):
        env, (i, o) = symbolic_sizes(200, 300)
        self.assertEqual(eager_rules.map_dtype(i, o, None), torch.int32)
        self.assertEqual(len(env.guards), 2)
        env, (i, o) = symbolic_sizes(200, self.LIMIT + 1)
        self.assertEqual(eager_rules.map_dtype(i, o, None), torch.int64)
        self.assertEqual(env.guards, [])  # the int64 map serves every size: nothing to recompile
        env, (i, o) = symbolic_sizes(200, 300)
        with exporting():
            self.assertEqual(eager_rules.map_dtype(i, o, None), torch.int64)
        self.assertEqual(env.guards, [])

    def test_int32_maps_of_symbolic_sizes_are_eager_maps(self):
        """The traced int32 map, run at other sizes, equals eager's, for every rule."""
        rules = [eager_rules.Rule(exact=False), eager_rules.Rule(exact=True), eager_rules.Rule(exact=False, double=True),
                 eager_rules.Rule(exact=True, centre_shift=True), eager_rules.Rule(exact=True, centre_shift=True, fma=True),
                 eager_rules.Rule(exact=False, header_special=True)]
        for rule, scale in itertools.product(rules, (None, 0.75)):
            def f(x):
                isize, osize = x.shape
                dtype = eager_rules.map_dtype(isize, osize, scale)
                o = torch.arange(osize, dtype=dtype)
                return eager_rules.source_index(o, isize, osize, scale, rule)

            graph = make_fx(f, tracing_mode="symbolic")(torch.empty(7, 11))
            for isize, osize in [(7, 11), (3, 2), (200, 300), (1234, 2345), (5, 10), (6, 6)]:
                index = graph(torch.empty(isize, osize))
                self.assertEqual(index.dtype, torch.int32)
                expected = eager_rules.static_source_indices(isize, osize, scale, rule)
                self.assertEqual(index.tolist(), expected, msg=(rule, scale, isize, osize))


class TestCpuKernelChoice(TestCase):
    def test_cpu_kernels_agree_for_nearest_without_scale(self):
        """forward_rule decides nothing (and guards nothing) for nearest without an explicit scale
        on a non-float64 input, because eager's two CPU kernels read the same inputs there; for
        float64 they do not. Same sizes through both kernels: generic (contiguous, 2 channels,
        oh + ow > 128) and channels-last (4 channels-last channels)."""
        pairs = [(i, o) for i in range(1, 81) for o in range(1, 81)] + random_size_pairs(50, seed=2)
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
                    rule = eager_rules.forward_rule(x, [osize, 200], False, [None, None])
                    self.assertEqual(rule, eager_rules.Rule(exact=False))
        self.assertEqual([d for d, n in differ.items() if n], [torch.float64])

    def test_cpu_kernels_agree_for_nearest_with_scale_where_no_special_case_fires(self):
        """With an explicit scale, eager's two CPU nearest kernels read the same inputs wherever
        the output size is neither I nor 2I (the header's special cases), and forward_rule then
        decides nothing; where it is I they differ, and forward_rule decides."""
        def both_kernels(isize, osize, scale):
            v = torch.arange(isize)
            rows = torch.stack([v // 64, v % 64]).float()
            generic = rows.view(1, 2, isize, 1)
            channels_last = torch.cat([rows, rows]).view(1, 4, isize, 1).contiguous(memory_format=torch.channels_last)
            a = aten.upsample_nearest2d.default(generic, [osize, 200], scale, None)[0, :, :, 0]
            b = aten.upsample_nearest2d.default(channels_last, [osize, 200], scale, None)[0, :2, :, 0]
            return generic, channels_last, torch.equal(a, b)

        for isize in range(1, 60):
            for scale in (0.3, 0.7, 1.3, 1.5, 1.7, 2.5, 3.1):
                osize = max(1, int(isize * scale))
                generic, channels_last, same = both_kernels(isize, osize, scale)
                if osize in (isize, 2 * isize):
                    continue
                self.assertTrue(same, msg=(isize, osize, scale))
                for x in (generic, channels_last):
                    rule = eager_rules.forward_rule(x, [osize, 200], False, [scale, None])
                    self.assertEqual(rule, eager_rules.Rule(exact=False), msg=(isize, osize, scale))
        # O == I with a scale other than 1: the channels-last kernel copies, the generic one scales.
        generic, channels_last, same = both_kernels(5, 5, 1.7)
        self.assertFalse(same)
        self.assertEqual(eager_rules.forward_rule(channels_last, [5, 200], False, [1.7, None]),
                         eager_rules.Rule(exact=False, header_special=True))

    def test_more_than_3_channels_in_the_example_is_a_guard(self):
        """A channels-last input whose example has more than 3 channels takes the channels-last
        kernel's map under a guard on the channel count: more channels reuse the graph, 3 channels
        compile another. Exact throughout; while exporting, no guard (selected at run time)."""
        import torch._dynamo.testing
        import torch.nn.functional as F

        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        fn = lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest-exact")  # noqa: E731
        compiled = torch.compile(fn, backend=counter, dynamic=True)
        for channels, graphs in ((8, 1), (9, 1), (3, 2)):  # none equal to a spatial size (duck sizing)
            x = torch.rand(2, channels, 5, 6, 7).contiguous(memory_format=torch.channels_last_3d)
            self.assertTrue(torch.equal(compiled(x), fn(x)), msg=channels)
            self.assertEqual(counter.frame_count, graphs, msg=channels)
        env, (c,) = symbolic_sizes(5)
        with exporting():
            self.assertFalse(size_conditions.holds_where_taken(c > 3))  # no proof: selected at run time
        self.assertEqual(env.guards, [])


instantiate_device_type_tests(TestEagerRules, globals(), only_for=("cpu", "cuda"))


if __name__ == "__main__":
    run_tests()
