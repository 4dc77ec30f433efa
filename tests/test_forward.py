"""Forward decompositions: bit-equal to eager, with eager's strides, on every layout and dtype."""

from __future__ import annotations

import itertools
from unittest import mock

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

import decomps
from lowerings import cpu_vectors
from tests.common import (
    RANKS,
    TABLE,
    aten,
    aten_kernel_nodes,
    assert_same,
    forward_op,
    generated_code,
    memory_format_of,
    through_decompositions,
)

NEAREST_OPINFOS = [
    op
    for op in op_db
    if (op.name, op.variant_test_name)
    in {
        ("nn.functional.interpolate", "nearest"),
        ("nn.functional.interpolate", "nearest-exact"),
        ("nn.functional.upsample_nearest", ""),
    }
]
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8)


def _random(shape, dtype, device):
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, dtype=dtype, device=device)
    return torch.randn(shape, dtype=dtype, device=device)


class TestForwardOpInfo(TestCase):
    @ops(NEAREST_OPINFOS)
    def test_opinfo_samples(self, device, dtype, op):
        """test_decomp's checks: bit-equal to eager; error vs a float64 reference no worse."""
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            args, kwargs = (sample.input, *sample.args), sample.kwargs

            def fn(*a):
                return op(*a, **kwargs)

            expected = fn(*args)
            actual = through_decompositions(fn, *args)
            assert_same(self, actual, expected, msg=str(sample))
            if dtype.is_floating_point:
                reference = fn(*(a.double() if isinstance(a, torch.Tensor) else a for a in args))
                ours = (actual.double() - reference).abs().max()
                eagers = (expected.double() - reference).abs().max()
                self.assertLessEqual(ours.item(), eagers.item())


def _layouts(rank, shape, dtype, device):
    """(name, tensor) for every layout eager handles differently."""
    x = _random(shape, dtype, device)
    yield "contiguous", x
    if rank > 1:
        yield "channels_last", x.contiguous(memory_format=memory_format_of(rank, True))
    big = _random([s * 2 + 1 for s in shape], dtype, device)
    yield "sliced", big[tuple(slice(1, None, 2) for _ in shape)]
    yield "transposed", x.transpose(-1, -2).contiguous().transpose(-1, -2) if rank > 1 else x[..., ::1]
    yield "expanded", x[:1, :1].expand(shape)


class TestForward(TestCase):
    def _check(self, x, output_size, scales, exact):
        """As installed (ATen's kernel where kernel_choice picks it) and as generated code."""
        op = forward_op(len(output_size), exact)
        expected = op(x, output_size, *scales)
        msg = f"{list(x.shape)} {x.stride()} -> {output_size} {scales}"
        assert_same(self, TABLE[op](x, output_size, *scales), expected, msg=msg)
        with generated_code():
            assert_same(self, TABLE[op](x, output_size, *scales), expected, msg=f"generated {msg}")

    def test_all_ranks_modes_dtypes_layouts(self, device):
        # Sizes that hit every path: identity, x2 / x4 repeat, x3 repeat, stride, gather, and a
        # short period along the innermost dim (slices on CPU where no outer dim gathers, e.g.
        # 10 -> 15, 26 -> 6, (6, 8) -> (12, 14); a gather after an outer gather, (6, 8) -> (9, 14)).
        cases = {
            1: [((2, 3, 16), [32]), ((2, 3, 16), [48]), ((2, 3, 17), [8]), ((1, 1, 7), [11]),
                ((2, 3, 10), [15]), ((2, 3, 26), [6])],
            2: [((2, 5, 8, 6), [16, 12]), ((2, 3, 9, 8), [3, 16]), ((1, 4, 7, 5), [11, 5]),
                ((2, 4, 20, 30), [13, 70]), ((3, 1, 6, 6), [24, 24]), ((2, 3, 6, 8), [9, 14]),
                ((2, 3, 6, 8), [12, 14])],
            3: [((1, 5, 4, 6, 5), [8, 12, 5]), ((2, 2, 6, 4, 5), [3, 9, 10]),
                ((1, 4, 3, 3, 8), [6, 6, 4]), ((1, 2, 4, 6, 4), [6, 9, 6]),
                ((1, 2, 4, 3, 4), [8, 3, 6])],
        }
        for rank in RANKS:
            for (shape, osize), dtype, exact in itertools.product(cases[rank], DTYPES, (False, True)):
                for _, x in _layouts(rank, shape, dtype, device):
                    self._check(x, osize, [None] * rank, exact)

    def test_explicit_scales(self, device):
        # recompute_scale_factor=False: the op gets the scale; CPU special-cases 1x/2x by size.
        for rank, exact, scale in itertools.product(RANKS, (False, True), (0.6, 1.7, 1 / 3, 2.0000001, 25.0, 2.0, 0.5)):
            shape = (2, 4) + (7,) * rank
            osize = [int(7 * scale)] * rank
            for channels_last in (False, True) if rank > 1 else (False,):
                x = _random(shape, torch.float32, device).contiguous(
                    memory_format=memory_format_of(rank, channels_last)
                )
                self._check(x, osize, [scale] * rank, exact)

    def test_symbolic_sizes_map_in_32_bits_where_it_fits(self, device):
        """With symbolic sizes the gather's maps are int32 (``eager_rules.map_dtype``), except
        where an explicit scale takes them past 32 bits (scale 1e-9: ``src(o) = 1e9 o``, which
        the clamp brings back to ``isize - 1``); per dim. Traced once, run at other sizes."""
        for scales, dtypes in (([None, None], [torch.int32] * 2), ([1.5, 1e-9], [torch.int32, torch.int64])):
            for exact in (False, True):
                op = forward_op(2, exact)

                def upsample(x):
                    return op(x, [x.shape[2] + 3, x.shape[3] * 3 // 2], *scales)

                with generated_code():
                    graph = make_fx(upsample, decomposition_table=TABLE, tracing_mode="symbolic")(
                        torch.randn(2, 3, 5, 8, device=device))
                aranges = [n.kwargs["dtype"] for n in graph.graph.nodes if n.target == aten.arange.default]
                self.assertEqual(aranges, dtypes, msg=(scales, exact))
                for shape in ((2, 3, 5, 8), (1, 2, 9, 7), (1, 1, 40, 33)):
                    x = torch.randn(shape, device=device)
                    assert_same(self, graph(x), upsample(x), msg=f"{scales} {exact} {shape}")

    def test_vec_overloads_reach_default(self, device):
        x = _random((2, 3, 5, 7), torch.float32, device)
        for exact in (False, True):
            vec = (aten._upsample_nearest_exact2d if exact else aten.upsample_nearest2d).vec
            for size, factors in (([10, 14], None), (None, [1.5, 2.0]), (None, [0.5, 3.0])):
                expected = vec(x, size, factors)
                assert_same(self, TABLE[vec](x, size, factors), expected)

    def test_out_overloads(self, device):
        x = _random((2, 3, 5, 7), torch.float32, device)
        for exact in (False, True):
            packet = aten._upsample_nearest_exact2d if exact else aten.upsample_nearest2d
            expected = packet.default(x, [9, 14])
            out = torch.empty(0, device=device)
            result = TABLE[packet.out](x, [9, 14], out=out)
            self.assertIs(result, out)
            assert_same(self, out, expected)

    def test_size_one_batch_and_channel(self, device):
        for rank in RANKS:
            for shape in ((1, 1) + (5,) * rank, (1, 7) + (4,) * rank, (3, 1) + (6,) * rank):
                for channels_last in (False, True) if rank > 1 else (False,):
                    x = _random(shape, torch.float32, device).contiguous(
                        memory_format=memory_format_of(rank, channels_last)
                    )
                    for exact in (False, True):
                        self._check(x, [s * 2 for s in shape[2:]], [None] * rank, exact)
                        self._check(x, [s + 3 for s in shape[2:]], [None] * rank, exact)


class TestShortPeriods(TestCase):
    """Innermost dims whose map repeats with a short period: slices on CPU where no outer dim
    gathers, a gather elsewhere."""

    def test_symbolic_sizes(self, device):
        # Traced once with symbolic sizes (a guard on the ratio and the size limit), then run at
        # other sizes with the same ratio: x1.5 by scale factor, and 4 -> 7 by output size.
        cases = [(aten.upsample_nearest1d.vec, aten._upsample_nearest_exact1d.vec, [10, 64, 1000, 2**16]),
                 (aten.upsample_nearest2d.vec, aten._upsample_nearest_exact2d.vec, [4, 40, 400])]
        for nearest, exact, widths in cases:
            for vec in (nearest, exact):
                two_d = vec in (aten.upsample_nearest2d.vec, aten._upsample_nearest_exact2d.vec)

                def upsample(x):
                    if two_d:
                        return vec(x, [x.shape[2] * 2, x.shape[3] * 7 // 4], None)
                    return vec(x, None, [1.5])

                # 2d: H repeats, so float64 (float32 gathers whole vectors with AVX512 there,
                # kernel_choice.period_slices)
                dtype = torch.float64 if two_d else torch.float32
                first = torch.randn((2, 3, 6, widths[0]) if two_d else (2, 3, widths[0]), device=device, dtype=dtype)
                graph = make_fx(upsample, decomposition_table=TABLE, tracing_mode="symbolic")(first)
                slices = any(n.target == aten.cat.default for n in graph.graph.nodes)
                self.assertEqual(slices, torch.device(device).type == "cpu", msg=vec)
                for w in widths:
                    x = torch.randn((2, 3, 5, w) if two_d else (1, 2, w), device=device, dtype=dtype)
                    assert_same(self, graph(x), upsample(x), msg=f"{vec} {w}")

    def test_outer_gather_keeps_the_gather(self, device):
        # An outer gather: no slices; on CPU (contiguous, float64, which the C++ backend gathers
        # lane by lane) ATen's kernel, else the gather.
        x = torch.randn(2, 3, 6, 8, device=device, dtype=torch.float64)
        cpu = torch.device(device).type == "cpu"
        for osize, slices in (([12, 14], True), ([9, 14], False), ([3, 14], True)):
            graph = make_fx(lambda x: aten.upsample_nearest2d(x, osize), decomposition_table=TABLE)(x)
            found = any(n.target == aten.cat.default for n in graph.graph.nodes)
            self.assertEqual(found, slices and cpu, msg=osize)
            self.assertEqual(bool(aten_kernel_nodes(graph)), cpu and not slices, msg=osize)
            assert_same(self, graph(x), aten.upsample_nearest2d(x, osize))
            with generated_code():
                graph = make_fx(lambda x: aten.upsample_nearest2d(x, osize), decomposition_table=TABLE)(x)
            self.assertEqual(any(n.target == aten.cat.default for n in graph.graph.nodes), slices and cpu)
            self.assertEqual(aten_kernel_nodes(graph), [])
            assert_same(self, graph(x), aten.upsample_nearest2d(x, osize))

    def test_channels_last_keeps_the_gather(self, device):
        x = torch.randn(2, 4, 6, 8, device=device).contiguous(memory_format=torch.channels_last)
        graph = make_fx(lambda x: aten.upsample_nearest2d(x, [9, 14]), decomposition_table=TABLE)(x)
        self.assertFalse(any(n.target == aten.cat.default for n in graph.graph.nodes))
        self.assertEqual(aten_kernel_nodes(graph), [])  # channels-last: generated on every device
        assert_same(self, graph(x), aten.upsample_nearest2d(x, [9, 14]))


class TestForwardGraphs(TestCase):
    """The decomposition's graph for three typical cases (static shapes, CPU)."""

    def _graph(self, fn, x, generated=False):
        """The traced graph's code; ``generated``: under ``generated_code()`` (no ATen kernels,
        no repeat ops), as on other devices and while exporting."""
        if generated:
            with generated_code():
                return self._graph(fn, x)
        return make_fx(fn, decomposition_table=TABLE)(x).code.strip()

    def test_graph_2x_is_repeat_op(self):
        x = torch.randn(1, 2, 3, 4)
        code = self._graph(lambda x: aten.upsample_nearest2d(x, [6, 8]), x)
        self.assertExpectedInline(code, """\
def forward(self, x_1):
    upsample_repeat = torch.ops.decomps.upsample_repeat.default(x_1, [2, 2]);  x_1 = None
    return upsample_repeat""")

    def test_graph_2x_is_expand_reshape(self):
        # The generated code of the same call: other devices, exporting.
        x = torch.randn(1, 2, 3, 4)
        code = self._graph(lambda x: aten.upsample_nearest2d(x, [6, 8]), x, generated=True)
        self.assertExpectedInline(code, """\
def forward(self, x_1):
    view = torch.ops.aten.view.default(x_1, [1, 2, 3, 1, 4, 1]);  x_1 = None
    expand = torch.ops.aten.expand.default(view, [1, 2, 3, 2, 4, 2]);  view = None
    clone = torch.ops.aten.clone.default(expand, memory_format = torch.contiguous_format);  expand = None
    _unsafe_view = torch.ops.aten._unsafe_view.default(clone, [1, 2, 6, 8]);  clone = None
    clone_1 = torch.ops.aten.clone.default(_unsafe_view, memory_format = torch.contiguous_format);  _unsafe_view = None
    return clone_1""")

    def test_graph_non_integer_ratio_is_aten_kernel(self):
        # CPU, contiguous, a gather along some dim, float64 (lane by lane in the C++ backend):
        # ATen's kernel as an extern call.
        x = torch.randn(1, 2, 3, 4, dtype=torch.float64)
        code = self._graph(lambda x: aten.upsample_nearest2d(x, [5, 9]), x)
        self.assertExpectedInline(code, """\
def forward(self, x_1):
    upsample_nearest = torch.ops.decomps.upsample_nearest.default(x_1, [5, 9], [None, None], False);  x_1 = None
    return upsample_nearest""")

    def test_graph_non_integer_ratio_gathers(self):
        # The generated code of the same call: other devices, channels-last, exporting; the
        # innermost map from a table, as with 512-bit vectors (kernel_choice.index_table).
        x = torch.randn(1, 2, 3, 4)
        with mock.patch.object(cpu_vectors, "vector_bits", lambda: 512):
            code = self._graph(lambda x: aten.upsample_nearest2d(x, [5, 9]), x, generated=True)
        self.assertExpectedInline(code, """\
def forward(self, x_1):
    arange = torch.ops.aten.arange.default(5, dtype = torch.int32, device = device(type='cpu'), pin_memory = False)
    _to_copy = torch.ops.aten._to_copy.default(arange, dtype = torch.float32);  arange = None
    mul = torch.ops.aten.mul.Tensor(_to_copy, 0.6000000238418579);  _to_copy = None
    _to_copy_1 = torch.ops.aten._to_copy.default(mul, dtype = torch.int32);  mul = None
    view = torch.ops.aten.view.default(_to_copy_1, [-1, 1]);  _to_copy_1 = None
    arange_1 = torch.ops.aten.arange.default(9, dtype = torch.int32, device = device(type='cpu'), pin_memory = False)
    _to_copy_2 = torch.ops.aten._to_copy.default(arange_1, dtype = torch.float32);  arange_1 = None
    mul_1 = torch.ops.aten.mul.Tensor(_to_copy_2, 0.4444444477558136);  _to_copy_2 = None
    _to_copy_3 = torch.ops.aten._to_copy.default(mul_1, dtype = torch.int32);  mul_1 = None
    index_table = torch.ops.decomps.index_table.default(_to_copy_3);  _to_copy_3 = None
    view_1 = torch.ops.aten.view.default(index_table, [-1]);  index_table = None
    index_by_maps = torch.ops.decomps.index_by_maps.default(x_1, [None, None, view, view_1]);  x_1 = view = view_1 = None
    clone = torch.ops.aten.clone.default(index_by_maps, memory_format = torch.contiguous_format);  index_by_maps = None
    return clone""")

    def test_graph_short_period_is_slices(self):
        # 4 -> 6 along the innermost dim repeats (0, 0, 1) every 2 inputs: 3 slices of each
        # period; the outer dim's 3 -> 3 is the identity.
        x = torch.randn(1, 2, 3, 4)
        code = self._graph(lambda x: aten.upsample_nearest2d(x, [3, 6]), x)
        self.assertExpectedInline(code, """\
def forward(self, x_1):
    view = torch.ops.aten.view.default(x_1, [1, 2, 3, 2, 2]);  x_1 = None
    slice_1 = torch.ops.aten.slice.Tensor(view, 4, 0, 1)
    slice_2 = torch.ops.aten.slice.Tensor(view, 4, 0, 1)
    slice_3 = torch.ops.aten.slice.Tensor(view, 4, 1, 2);  view = None
    cat = torch.ops.aten.cat.default([slice_1, slice_2, slice_3], 4);  slice_1 = slice_2 = slice_3 = None
    view_1 = torch.ops.aten.view.default(cat, [1, 2, 3, 6]);  cat = None
    return view_1""")

    def test_graph_downsample_is_strided_slice(self):
        x = torch.randn(1, 2, 8, 6)
        code = self._graph(lambda x: aten._upsample_nearest_exact2d(x, [4, 3]), x)
        self.assertExpectedInline(code, """\
def forward(self, x_1):
    slice_1 = torch.ops.aten.slice.Tensor(x_1, 2, 1, 8, 2);  x_1 = None
    slice_2 = torch.ops.aten.slice.Tensor(slice_1, 3, 1, 6, 2);  slice_1 = None
    clone = torch.ops.aten.clone.default(slice_2, memory_format = torch.contiguous_format);  slice_2 = None
    return clone""")


instantiate_device_type_tests(TestForwardOpInfo, globals(), only_for=("cpu", "cuda"))
instantiate_device_type_tests(TestForward, globals(), only_for=("cpu", "cuda"))
instantiate_device_type_tests(TestShortPeriods, globals(), only_for=("cpu", "cuda"))

if __name__ == "__main__":
    run_tests()
