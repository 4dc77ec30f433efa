"""Backward decompositions: gathers that match eager's backward ops and autograd."""

from __future__ import annotations

import contextlib
import itertools
import re
from unittest import mock

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase, run_tests

from decomps import backward as backward_decompositions
from decomps import eager_rules, index_tables, kernel_choice, size_conditions
from decomps.backward import MAX_UNROLLED_TAPS
from tests.common import (
    RANKS,
    TABLE,
    assert_grad_close,
    aten_kernel_nodes,
    backward_op,
    generated_code,
    gradient_tolerance,
    memory_format_of,
    runtime_sizes,
    through_decompositions,
)
from tests.test_forward import NEAREST_OPINFOS

RATIOS = (2, 3, 1.5, 0.75, 0.5, 1.7, 0.6, 7 / 3)
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# The plain store's ops: ``decomps::index_put_by_maps`` where the owners are a table, else
# ``_unsafe_index_put``.
STORE_OPS = (torch.ops.aten.index_put.default, torch.ops.aten._unsafe_index_put.default,
             torch.ops.decomps.index_put_by_maps.default)


def slice_sums(graph) -> int:
    """Concatenations of summed slices in ``graph``; the one that feeds a window table
    (``kernel_choice.window_table``) joins index vectors and does not count."""
    table = torch.ops.decomps.index_table.default
    return sum(n.target == torch.ops.aten.cat.default and not any(u.target is table for u in n.users)
               for n in graph.graph.nodes)


class TestBackwardOpInfo(TestCase):
    @ops(NEAREST_OPINFOS, allowed_dtypes=FLOAT_DTYPES)
    def test_opinfo_gradients(self, device, dtype, op):
        """Gradients through the decompositions vs eager autograd and a float64 reference."""
        for sample in op.sample_inputs(device, dtype, requires_grad=True):
            kwargs = sample.kwargs
            x = sample.input
            grad_out = torch.randn_like(op(x, *sample.args, **kwargs))

            def grad_of(inp, g):
                out = op(inp, *sample.args, **kwargs)
                return torch.autograd.grad(out, inp, g)[0]

            expected = grad_of(x, grad_out)
            actual = through_decompositions(grad_of, x, grad_out)
            reference = grad_of(x.detach().double().requires_grad_(), grad_out.double())
            self.assertEqual(actual.stride(), expected.stride(), msg=str(sample))
            tol = gradient_tolerance(grad_out, lambda g: grad_of(x.detach().to(g.dtype).requires_grad_(), g))
            assert_grad_close(self, actual, expected, tol, msg=str(sample))
            ours = (actual.double() - reference).abs().max().item()
            eagers = (expected.double() - reference).abs().max().item()
            self.assertLessEqual(ours, eagers + tol.max().item(), msg=str(sample))


def _grid_cases(rank):
    spatial = {1: [1, 7, 64, 1023], 2: [1, 5, 33, 128], 3: [1, 3, 12]}[rank]
    for isize, ratio in itertools.product(spatial, RATIOS):
        osize = max(1, int(isize * ratio))
        yield isize, osize, None  # sizes given (recompute_scale_factor=True)
        yield isize, osize, ratio  # scale given (recompute_scale_factor False / None)


class TestBackward(TestCase):
    def setUp(self):
        super().setUp()
        # The choices for sizes the kernels read at run time; under size variants CUDA chooses as
        # for static sizes (tests/test_size_variants.py).
        self.enterContext(runtime_sizes())

    def _check(self, grad_output, output_size, input_size, scales, exact):
        op = backward_op(len(output_size), exact)
        expected = op(grad_output, output_size, input_size, *scales)
        msg = f"{input_size} -> {output_size} {scales} {grad_output.dtype} {grad_output.stride()}"
        tol = gradient_tolerance(
            grad_output, lambda g: op(g, output_size, input_size, *scales)
        )
        # As installed (ATen's kernel where kernel_choice picks it) and as generated code.
        for generated in (False, True):
            with generated_code() if generated else contextlib.nullcontext():
                actual = TABLE[op](grad_output, output_size, input_size, *scales)
            self.assertEqual(actual.stride(), expected.stride(), msg=msg)
            assert_grad_close(self, actual, expected, tol, msg=f"{'generated ' * generated}{msg}")

    def test_grid(self, device):
        for rank, exact in itertools.product(RANKS, (False, True)):
            for isize, osize, scale in _grid_cases(rank):
                dims = [isize] + [min(isize, 9)] * (rank - 1)
                odims = [osize] + [max(1, int(d * 1.5)) for d in dims[1:]]
                scales = [scale] + [None] * (rank - 1)
                for dtype in FLOAT_DTYPES:
                    g = torch.randn([2, 3] + odims, dtype=dtype, device=device)
                    self._check(g, odims, [2, 3] + dims, scales, exact)

    def test_large_2d(self, device):
        for (ih, iw), (oh, ow), exact in itertools.product(
            [(512, 512), (1024, 1024)], [(1024, 1024), (768, 1536), (1023, 511)], (False, True)
        ):
            g = torch.randn(1, 1, oh, ow, device=device)
            self._check(g, [oh, ow], [1, 1, ih, iw], [None, None], exact)
        g = torch.randn(1, 1, 1, 1, device=device)
        self._check(g, [1, 1], [1, 1, 1, 1], [None, None], False)

    def test_layouts(self, device):
        for rank, exact, channels_last in itertools.product((2, 3), (False, True), (False, True)):
            isize, osize = [6, 5, 7][:rank], [9, 10, 3][:rank]
            g = torch.randn([2, 5] + osize, device=device).contiguous(
                memory_format=memory_format_of(rank, channels_last)
            )
            self._check(g, osize, [2, 5] + isize, [None] * rank, exact)
            strided = torch.randn([2, 5] + [o * 2 for o in osize], device=device)
            strided = strided[(slice(None), slice(None)) + (slice(None, None, 2),) * rank]
            self._check(strided, osize, [2, 5] + isize, [None] * rank, exact)

    def test_channels_last_gathers_over_channels_innermost(self, device):
        """Channels-last 2d window gathers over symbolic sizes: the (N, H, W, C) form gives
        eager's values and strides, and the same bits as the (N, C, H, W) form."""
        cases = [([6, 5], [9, 10]), ([20, 20], [30, 30]), ([9, 8], [4, 5]), ([1, 7], [3, 1])]
        for (isize, osize), exact, dtype, channels in itertools.product(
            cases, (False, True), (torch.float32, torch.bfloat16), (1, 3, 16)
        ):
            op = backward_op(2, exact)
            g = torch.randn([2, channels] + osize, dtype=dtype, device=device)
            g = g.contiguous(memory_format=torch.channels_last)
            x = torch.empty([2, channels] + isize, device=device)

            def backward(g, x):
                return TABLE[op](g, list(g.shape[2:]), list(x.shape))

            msg = f"{isize} -> {osize} {dtype} C={channels} exact {exact}"
            forms = []
            for devices in ((torch.device(device).type,), ()):
                innermost_on = mock.patch.object(backward_decompositions, "CHANNELS_INNERMOST_DEVICES", devices)
                with generated_code(), innermost_on:
                    forms.append(make_fx(backward, tracing_mode="symbolic")(g, x)(g, x))
            innermost, outermost = forms
            expected = op(g, osize, [2, channels] + isize)
            self.assertEqual(innermost.stride(), expected.stride(), msg=msg)
            self.assertTrue(torch.equal(innermost, outermost), msg)
            assert_grad_close(self, innermost, expected,
                              gradient_tolerance(g, lambda t: op(t, osize, [2, channels] + isize)), msg)

    def test_window_gathers_read_one_table(self, device):
        """``kernel_choice.window_table`` on this device: a window gather over several dims reads
        their positions from one ``decomps::index_table``, with the same bits and strides as
        without it (unrolled taps and the reduction over more than 16), traced with symbolic
        sizes; and compiled, where Inductor lowers the table. A gather over one dim computes
        its positions. One-tap gathers, which compute theirs on some devices
        (``test_one_tap_gathers_compute_their_positions``), read the table here too."""
        from torch._inductor.utils import fresh_inductor_cache

        table_op = torch.ops.decomps.index_table.default
        cases = [([13, 11], [23, 20]), ([23, 20], [12, 13]), ([29], [50]), ([6, 5, 7], [9, 10, 3]), ([11, 11], [53, 53])]
        for (isize, osize), exact, channels_last in itertools.product(cases, (False, True), (False, True)):
            rank = len(isize)
            if channels_last and rank == 1:
                continue
            op = backward_op(rank, exact)
            g = torch.randn([2, 3] + osize, device=device).contiguous(memory_format=memory_format_of(rank, channels_last))
            x = torch.empty([2, 3] + isize, device=device)

            def backward(g, x):
                return TABLE[op](g, list(g.shape[2:]), list(x.shape))

            msg = f"{isize} -> {osize} channels_last={channels_last} exact {exact}"
            forms, tables = [], []
            for devices in ((torch.device(device).type,), ()):
                with generated_code(), mock.patch.object(kernel_choice, "WINDOW_TABLE_DEVICES", devices), \
                        mock.patch.object(kernel_choice, "POSITIONS_IN_GATHER_DEVICES", ()):
                    graph = make_fx(backward, tracing_mode="symbolic")(g, x)
                forms.append(graph(g, x))
                tables.append(sum(n.target is table_op for n in graph.graph.nodes))
            self.assertEqual(tables, [int(rank > 1), 0], msg=msg)
            self.assertTrue(torch.equal(forms[0], forms[1]), msg)
            expected = op(g, osize, [2, 3] + isize)
            self.assertEqual(forms[0].stride(), expected.stride(), msg=msg)
            assert_grad_close(self, forms[0], expected, gradient_tolerance(g, lambda t: op(t, osize, [2, 3] + isize)), msg)

        for dynamic in (True, False):
            x = torch.randn(2, 3, 13, 11, device=device).contiguous(memory_format=torch.channels_last).requires_grad_()
            g = torch.randn(2, 3, 23, 20, device=device).contiguous(memory_format=torch.channels_last)

            def step(x):
                return torch.nn.functional.interpolate(x, size=(23, 20), mode="nearest")

            grads = []
            for devices in ((torch.device(device).type,), ()):
                torch._dynamo.reset()
                with fresh_inductor_cache(), generated_code(), mock.patch.object(
                    kernel_choice, "WINDOW_TABLE_DEVICES", devices
                ):
                    grads.append(torch.autograd.grad(torch.compile(step, dynamic=dynamic)(x), x, g)[0])
            (expected,) = torch.autograd.grad(step(x), x, g)
            self.assertTrue(torch.equal(grads[0], grads[1]), f"dynamic={dynamic}")
            self.assertEqual(grads[0].stride(), expected.stride())
            assert_grad_close(self, grads[0], expected, gradient_tolerance(g, lambda t: torch.autograd.grad(
                step(x), x, t)[0]), f"dynamic={dynamic}")

    def test_one_tap_gathers_compute_their_positions(self, device):
        """``kernel_choice.positions_in_gather``: a downsample's window gather (one tap) over
        one dim reads its window starts through ``decomps::gather_window_starts``, no table, with
        the same bits as the table's gather, eager's strides, and traced with symbolic sizes;
        over two or three dims it keeps the table, with symbolic and with static sizes, for
        either rule. Compiled (static and dynamic sizes) its values are eager's (each a copy of
        one gradient element), and on CUDA the backward is one kernel, two with the table."""
        from torch._inductor.utils import fresh_inductor_cache, run_and_get_code

        starts_op, table_op = index_tables.gather_window_starts, torch.ops.decomps.index_table.default
        here = (torch.device(device).type,)
        cases = [([23, 20], [12, 13]), ([29], [11]), ([9, 10, 7], [4, 10, 3]), ([40, 37], [40, 9])]
        for (isize, osize), exact, channels_last in itertools.product(cases, (False, True), (False, True)):
            rank = len(isize)
            if channels_last and rank == 1:
                continue
            op = backward_op(rank, exact)
            layout = memory_format_of(rank, channels_last)
            g = torch.randn([2, 3] + osize, dtype=torch.float64, device=device).contiguous(memory_format=layout)
            x = torch.empty([2, 3] + isize, device=device)

            def backward(g, x):
                return TABLE[op](g, list(g.shape[2:]), list(x.shape))

            msg = f"{isize} -> {osize} channels_last={channels_last} exact {exact}"
            forms, counts = [], []
            for devices in (here, ()):
                with generated_code(), mock.patch.object(kernel_choice, "POSITIONS_IN_GATHER_DEVICES", devices), \
                        mock.patch.object(kernel_choice, "WINDOW_TABLE_DEVICES", here):
                    graph = make_fx(backward, tracing_mode="symbolic")(g, x)
                forms.append(graph(g, x))
                counts.append([sum(n.target is t for n in graph.graph.nodes) for t in (starts_op, table_op)])
            self.assertEqual(counts[1][0], 0, msg)
            # both dims of the 2-d case downsample; the 3-d one gathers one dim after its short period
            two_dims = rank == 2 and all(i != o for i, o in zip(isize, osize))
            if rank <= 2:
                self.assertEqual(counts[0], [0, 1] if two_dims else [1, 0], msg)
            else:  # the gather's dims, after index-free ones and short periods: the op or a table
                self.assertEqual(counts[0][0] * counts[0][1], 0, msg)
            with generated_code(), mock.patch.object(kernel_choice, "POSITIONS_IN_GATHER_DEVICES", here), \
                    mock.patch.object(kernel_choice, "WINDOW_TABLE_DEVICES", here):
                graph = make_fx(backward)(g, x)  # static sizes
            forms.append(graph(g, x))
            static_counts = [sum(n.target is t for n in graph.graph.nodes) for t in (starts_op, table_op)]
            self.assertEqual(static_counts, [0, 1] if two_dims else counts[0], msg)
            self.assertTrue(torch.equal(forms[0], forms[1]) and torch.equal(forms[0], forms[2]), msg)
            expected = op(g, osize, [2, 3] + isize)
            self.assertEqual(forms[0].stride(), expected.stride(), msg=msg)
            self.assertEqual(forms[2].stride(), expected.stride(), msg=msg)
            assert_grad_close(self, forms[0], expected, gradient_tolerance(g, lambda t: op(t, osize, [2, 3] + isize)), msg)

        with mock.patch.object(kernel_choice, "POSITIONS_IN_GATHER_DEVICES", here):
            eligible = torch.empty(1, device=device)
            self.assertEqual([kernel_choice.positions_in_gather(eligible, 1, dims) for dims in (1, 2, 3)],
                             [True, False, False])
            self.assertFalse(kernel_choice.positions_in_gather(eligible, 2, 1))

        compiled = [  # (case, mode, channels_last, dynamic)
            (cases[0], "nearest-exact", True, True), (cases[0], "nearest", False, False),
            (cases[0], "nearest", True, True), (cases[1], "nearest", False, True),
            (cases[3], "nearest-exact", True, True),
        ]
        for (isize, osize), mode, channels_last, dynamic in compiled:
            layout = memory_format_of(len(isize), channels_last)
            x = torch.randn([2, 3] + isize, dtype=torch.bfloat16, device=device).contiguous(memory_format=layout)
            g = torch.randn([2, 3] + osize, dtype=torch.bfloat16, device=device).contiguous(memory_format=layout)

            def step(x, size=tuple(osize), mode=mode):
                x = x.detach().requires_grad_()
                return torch.autograd.grad(torch.nn.functional.interpolate(x, size=size, mode=mode), x, g)[0]

            msg = f"{isize} -> {osize} {mode} channels_last={channels_last} dynamic={dynamic}"
            torch._dynamo.reset()
            with fresh_inductor_cache(), generated_code(), mock.patch.object(
                kernel_choice, "POSITIONS_IN_GATHER_DEVICES", here
            ):
                out, codes = run_and_get_code(torch.compile(step, dynamic=dynamic), x)
            expected = step(x)
            self.assertTrue(torch.equal(out, expected), msg)
            self.assertEqual(out.stride(), expected.stride(), msg=msg)
            # lowered: no extern call of the op (the comments name it: its node)
            code = "\n".join(line for line in "\n".join(codes).splitlines() if not line.lstrip().startswith("#"))
            self.assertNotIn("decomps.gather_window_starts", code, msg)
            if torch.device(device).type == "cuda":
                (backward_code,) = [c for c in codes if "_backward']" in c.partition("\n")[0]]
                # the table is one more kernel; a gather over one dim computes its starts
                table = sum(i != o for i, o in zip(isize, osize)) > 1
                self.assertEqual(backward_code.count(".run("), 2 if table else 1, msg)

    def test_grad_input_overload(self, device):
        g = torch.randn(2, 3, 10, 12, device=device)
        for exact in (False, True):
            packet = backward_op(2, exact).overloadpacket
            expected = packet.default(g, [10, 12], [2, 3, 4, 5])
            out = torch.empty(0, device=device)
            result = TABLE[packet.grad_input](g, [10, 12], [2, 3, 4, 5], grad_input=out)
            self.assertIs(result, out)
            assert_grad_close(self, out, expected, gradient_tolerance(g, lambda t: packet.default(t, [10, 12], [2, 3, 4, 5])))

    def test_symbolic_sizes(self, device):
        """Traced with symbolic sizes: window bounds that hold for the sizes, scatter otherwise.

        With an explicit scale, eager's CPU backward gives the last input every output from
        about ``(isize - 1) * scale`` on; a scale that did not produce the output size (a direct
        op call) makes that window longer than any bound from the scale: the graph scatters.
        ``taps``: the window positions each grad_input element reads, ``ceil(ratio)`` where
        ``backward_windows.ceil_ratio_bounds_windows`` holds (downsampling, x1.5), else one more
        (integer ratios, or ratios too close to one for the size); 0 for a power-of-two repeat.
        On CPU a ratio with a short period (2 / 3, 3 / 2) sums slices of each period instead.
        """
        cases = [  # isize, osize, scale, taps, short period (sums of slices on CPU)
            (1000, 1500, 1.5, 2, True), (333, 999, 3.0, 4, False), (100003, 170005, 1.7, 3, False),
            (4096, 8192, 2.0, 0, False), (65536, 196608, None, 4, False), (50, 23, None, 1, False),
            (9, 31, None, 4, False), (10, 9, None, 1, False), (600, 400, None, 1, True),
            (7, 40, 0.5, 1, False), (10, 40, 3.0, 4, False), (10, 9, 1.3, 2, False),  # output sizes the scale did not give
            (10, 250, 25.0, 26, False),  # a window bound past MAX_UNROLLED_TAPS: a sum over window dims
        ]
        for (isize, osize, scale, taps, period), exact in itertools.product(cases, (False, True)):
            op = backward_op(1, exact)

            def backward(g, x):
                return TABLE[op](g, [g.shape[2]], list(x.shape), scale)

            g = torch.randn(2, 3, osize, dtype=torch.float64, device=device)
            x = torch.empty(2, 3, isize, device=device)
            msg = f"{isize} -> {osize} scale {scale} exact {exact}"
            cpu = torch.device(device).type == "cpu"
            expected = op(g, [osize], [2, 3, isize], scale)
            tol = gradient_tolerance(g, lambda t: op(t, [osize], [2, 3, isize], scale))
            graph = make_fx(backward, tracing_mode="symbolic")(g, x)
            assert_grad_close(self, graph(g, x), expected, tol, msg)
            # ATen's kernel: on CUDA wherever the windows are gathered (1d: no outer dim on CPU),
            # but for a downsample without an explicit scale, stored to each input instead.
            stores = not cpu and taps == 1 and scale is None
            externs = [] if cpu or not taps or stores else ["decomps.upsample_nearest_backward.default"]
            self.assertEqual(aten_kernel_nodes(graph), externs, msg)
            with generated_code():
                graph = make_fx(backward, tracing_mode="symbolic")(g, x)
            assert_grad_close(self, graph(g, x), expected, tol, msg)
            slices = slice_sums(graph) > 0
            self.assertEqual(slices, period and cpu, msg)
            if slices:
                self.assertFalse(any(n.target == torch.ops.aten._unsafe_index.Tensor for n in graph.graph.nodes))
                continue
            scatters = any(n.target == torch.ops.aten.index_put.default for n in graph.graph.nodes)
            inconsistent = scale is not None and osize > isize * scale
            self.assertEqual(scatters, inconsistent and cpu, msg)
            # the gather is an unrolled sum of window positions up to MAX_UNROLLED_TAPS of them
            reduces = any(n.target == torch.ops.aten.sum.dim_IntList
                          and n.args[0].target == torch.ops.aten.where.self for n in graph.graph.nodes)
            self.assertEqual(reduces, not scatters and taps > MAX_UNROLLED_TAPS, msg)
            if not scatters and not reduces:
                # one tap computes its positions in the gather where ``positions_in_gather`` says
                reads = sum(n.target == torch.ops.aten._unsafe_index.Tensor for n in graph.graph.nodes)
                starts = sum(n.target == index_tables.gather_window_starts for n in graph.graph.nodes)
                one_tap = kernel_choice.positions_in_gather(g, taps, 1)
                self.assertEqual((reads, starts), (0, 1) if one_tap else (taps, 0), msg)

    def test_short_periods(self, device):
        """Innermost dims whose windows repeat with a short period (sums of slices on CPU, and on
        CUDA from 2d on), alone and after an outer dim's gather or repeat, every dtype, static
        sizes."""
        cases = [([10], [15]), ([12], [8]), ([7, 8], [11, 14]), ([6, 20], [12, 30]),
                 ([3, 4, 6], [5, 6, 9]), ([6, 4, 4], [4, 8, 6])]
        for (isize, osize), exact, dtype in itertools.product(cases, (False, True), FLOAT_DTYPES):
            g = torch.randn([2, 3] + osize, dtype=dtype, device=device)
            self._check(g, osize, [2, 3] + isize, [None] * len(osize), exact)
            op = backward_op(len(osize), exact)
            cpu = torch.device(device).type == "cpu"
            graph = make_fx(lambda g: TABLE[op](g, osize, [2, 3] + isize), decomposition_table=TABLE)(g)
            # On CPU an outer gather after the sums takes ATen's kernel instead.
            outer_gather = any(o % i and i % o for i, o in zip(isize[:-1], osize[:-1]))
            self.assertEqual(bool(aten_kernel_nodes(graph)), cpu and outer_gather, msg=(isize, osize))
            with generated_code():
                graph = make_fx(lambda g: TABLE[op](g, osize, [2, 3] + isize), decomposition_table=TABLE)(g)
            slices = slice_sums(graph) > 0
            self.assertEqual(slices, cpu or len(osize) > 1, msg=(isize, osize))  # CUDA: 2d, 3d

    def test_outer_short_periods_with_symbolic_sizes(self, device):
        """With symbolic sizes, every dim whose windows repeat with a short period sums slices,
        outer dims too where each dim inside them gathers no index (backward.OUTER_PERIOD_DEVICES
        and OUTER_PERIOD_MAX_RANK, here this device and 3d): no gather, no ATen kernel; a dim
        without a short period keeps the window gather and the dims outside it too, their
        positions from one table where two dims gather (kernel_choice.window_table)."""
        cases = [  # isize, osize, concatenations (one per summed dim), gathered dims
            ([8, 10], [12, 15], 2, 0), ([4, 6, 8], [6, 9, 12], 3, 0), ([8, 5], [12, 10], 1, 0),
            ([8, 10], [12, 17], 0, 2), ([9, 10], [13, 15], 1, 1), ([200, 200], [300, 300], 2, 0),
        ]
        devices = (torch.device(device).type,)
        for (isize, osize, cats, gathered), exact, dtype in itertools.product(
            cases, (False, True), (torch.float32, torch.bfloat16)
        ):
            op = backward_op(len(osize), exact)
            g = torch.randn([2, 3] + osize, dtype=dtype, device=device)
            x = torch.empty([2, 3] + isize, device=device)

            def backward(g, x):
                return TABLE[op](g, list(g.shape[2:]), list(x.shape))

            with generated_code(), mock.patch.object(backward_decompositions, "OUTER_PERIOD_DEVICES", devices), \
                    mock.patch.object(backward_decompositions, "OUTER_PERIOD_MAX_RANK", 3), \
                    mock.patch.object(kernel_choice, "WINDOW_TABLE_DEVICES", devices):
                graph = make_fx(backward, tracing_mode="symbolic")(g, x)
            msg = f"{isize} -> {osize} exact {exact} {dtype}"
            nodes = [n.target for n in graph.graph.nodes]
            self.assertEqual(slice_sums(graph), cats, msg)
            gathers = nodes.count(torch.ops.aten._unsafe_index.Tensor)
            self.assertEqual(gathers > 0, gathered > 0, msg)
            self.assertEqual(nodes.count(torch.ops.decomps.index_table.default), int(gathered > 1), msg)
            expected = op(g, osize, [2, 3] + isize)
            actual = graph(g, x)
            self.assertEqual(actual.stride(), expected.stride(), msg=msg)
            tol = gradient_tolerance(g, lambda t: op(t, osize, [2, 3] + isize))
            assert_grad_close(self, actual, expected, tol, msg)

    def test_plain_store_for_downsampling(self, device):
        """Where no input receives two outputs and some dim gathers, the backward stores each
        gradient element into its input (one ``index_put`` without accumulation): on CPU for
        contiguous and channels-last 2d gradients, on CUDA for symbolic sizes without explicit scales
        (``kernel_choice.plain_store``, ``backward_windows.injective_windows``). Eager's bits and
        strides, traced with symbolic sizes and run with real ones; ``generated_code()`` gathers."""
        cases = [  # input spatial size, output size, scales: no short period, no index-free dim
            ([50], [23], [None]), ([40], [28], [0.7]),
            ([50, 40], [23, 31], [None, None]), ([17, 9], [5, 7], [None, None]), ([20, 30], [11, 16], [0.55, 0.55]),
            ([9, 10, 11], [4, 7, 6], [None] * 3),
        ]
        cpu = torch.device(device).type == "cpu"
        for (isize, osize, scales), exact, dtype, channels_last, tracing in itertools.product(
            cases, (False, True), FLOAT_DTYPES, (False, True), ("symbolic", "real")
        ):
            rank = len(isize)
            if channels_last and rank == 1:
                continue
            op = backward_op(rank, exact)
            g = torch.randn([2, 3] + osize, dtype=dtype, device=device)
            g = g.contiguous(memory_format=memory_format_of(rank, channels_last))
            x = torch.empty([2, 3] + isize, device=device)

            def backward(g, x):
                return TABLE[op](g, list(g.shape[2:]), list(x.shape), *scales)

            expected = op(g, osize, [2, 3] + isize, *scales)
            msg = f"{isize} -> {osize} {scales} {dtype} channels_last={channels_last} {tracing} exact {exact}"
            for generated in (False, True):
                with generated_code() if generated else contextlib.nullcontext():
                    graph = make_fx(backward, tracing_mode=tracing)(g, x)
                actual = graph(g, x)
                self.assertTrue(torch.equal(actual, expected), msg)
                self.assertEqual(actual.stride(), expected.stride(), msg=msg)
                puts = [n for n in graph.graph.nodes if n.target in STORE_OPS]
                if cpu:
                    stores = not channels_last or rank == 2  # channels_last_3d keeps ATen's kernel
                else:
                    stores = tracing == "symbolic" and scales[0] is None
                self.assertEqual(len(puts), int(stores and not generated), msg)
                self.assertFalse(any(n.args[3:4] == (True,) or n.kwargs.get("accumulate") for n in puts), msg)

    def test_plain_store_compiled(self, device):
        """Compiled training steps of downsamples, ``dynamic=True``, a literal and a symbolic
        output size: eager's gradient bit for bit, its strides, a non-accumulating store in the
        backward graph and no scatter-add."""
        from tests.graphs import post_grad_graphs

        for mode, channels_last, literal in itertools.product(("nearest", "nearest-exact"), (False, True), (False, True)):
            x = torch.randn(2, 3, 45, 37, device=device)
            x = x.contiguous(memory_format=memory_format_of(2, channels_last)).requires_grad_()
            o = torch.empty(20, 31)

            def step(x, o):
                return torch.nn.functional.interpolate(x, size=(20, 31) if literal else o.shape, mode=mode)

            torch._dynamo.reset()
            with post_grad_graphs() as graphs:
                out = torch.compile(step, dynamic=True)(x, o)
                g = torch.randn_like(out)
                (grad,) = torch.autograd.grad(out, x, g)
            (expected,) = torch.autograd.grad(step(x, o), x, g)
            msg = f"{mode} channels_last={channels_last} literal={literal}"
            self.assertTrue(torch.equal(grad, expected), msg)
            self.assertEqual(grad.stride(), expected.stride(), msg=msg)
            self.assertEqual(graphs.accumulating_scatters(), [set(), set()], msg=msg)
            self.assertTrue(graphs.scatters()[1], msg=msg)

    def test_half_precision_accumulates_in_float32(self, device):
        # 64 terms of 1 + 2**-8: a bfloat16 running sum would stall; float32 then one rounding not.
        g = torch.full((1, 1, 64), 1 + 2**-8, dtype=torch.bfloat16, device=device)
        for exact in (False, True):
            op = backward_op(1, exact)
            ours = TABLE[op](g, [64], [1, 1, 1])
            self.assertEqual(ours.item(), torch.tensor(64 * (1 + 2**-8)).to(torch.bfloat16).item())
            self.assertEqual(ours, op(g, [64], [1, 1, 1]), atol=0, rtol=0)


class TestWindowStartsDtype(TestCase):
    def test_cuda_windows_in_32_bits_up_to_2d(self):
        """CUDA's window starts are int32 (where they fit) in 1d and 2d, int64 in 3d and for the
        CPU rules (``INT32_WINDOW_MAX_RANK``)."""
        self.assertEqual(backward_decompositions.INT32_WINDOW_MAX_RANK, 2)
        cpu_rule = eager_rules.cpu_backward_rule(False)
        for rule, rank, dtype in [("cuda", 1, torch.int32), ("cuda-exact", 2, torch.int32),
                                  ("cuda", 3, torch.int64), (cpu_rule, 2, torch.int64)]:
            lo = backward_decompositions._window_starts(200, 300, None, rule, "cpu", None, rank)
            self.assertEqual(lo.dtype, dtype, msg=(rule, rank))


class TestIdentityTest(TestCase):
    """CUDA's 2d backward copies where the sizes match, whatever the scales: with symbolic sizes
    and explicit scales the decomposition selects that at run time (a size test per dim), except
    where some dim's output size comes from a scale that rules it out
    (``size_conditions.scaled_size_differs``). Traced on the meta device, which takes CUDA's rules."""

    def _size_tests(self, scale: float, from_scale: bool, exact: bool) -> int:
        def f(x, g):
            isizes = list(x.shape)
            if from_scale:
                osizes = [size_conditions.scaled_size(i, scale) for i in isizes[2:]]
                g = x.new_ones([*isizes[:2], *osizes])
            else:
                osizes = list(g.shape[2:])
            return backward_decompositions.upsample_nearest_backward(g, osizes, isizes, [scale, scale], exact)

        x = torch.empty(2, 3, 7, 9, device="meta")
        g = torch.empty(2, 3, int(7 * scale), int(9 * scale), device="meta")
        graph = make_fx(f, tracing_mode="symbolic")(x, g)
        return sum(n.target == torch.ops.aten.eq.Scalar for n in graph.graph.nodes)

    def test_scales_that_rule_out_equal_sizes_drop_the_test(self):
        for scale, from_scale, tests in [(1.5, True, 0), (0.5, True, 0), (1.2, True, 2), (1.5, False, 2)]:
            for exact in (False, True):
                self.assertEqual(self._size_tests(scale, from_scale, exact), tests, msg=(scale, from_scale, exact))


class TestBackwardKernels(TestCase):
    def _backward_kernels(self, step, x, dynamic: bool, msg: str) -> set[str]:
        """The Triton kernels of ``step``'s compiled backward, whose gradient is checked against
        eager's (strides too)."""
        from torch._inductor.utils import run_and_get_code

        g = torch.randn_like(step(x))
        torch._dynamo.reset()
        compiled = torch.compile(step, dynamic=dynamic)
        (grad,), codes = run_and_get_code(lambda: torch.autograd.grad(compiled(x), x, g))
        (expected,) = torch.autograd.grad(step(x), x, g)
        self.assertEqual(grad.stride(), expected.stride(), msg=msg)
        assert_grad_close(self, grad, expected, gradient_tolerance(g, lambda t: torch.autograd.grad(
            step(x), x, t)[0]), msg)
        return set(re.findall(r"def (triton_\w+)\(", codes[-1]))

    def test_window_gather_launches_one_kernel_before_it(self, device):
        """A static 2d window gather, contiguous and channels-last: its backward is the gather and
        one kernel for the window positions (``kernel_choice.window_table``; without the table
        Inductor realized four); eager's gradient."""
        for channels_last, mode in itertools.product((False, True), ("nearest", "nearest-exact")):
            x = torch.randn(2, 3, 13, 11, device=device).contiguous(memory_format=memory_format_of(2, channels_last))
            x.requires_grad_()

            def step(x):
                return torch.nn.functional.interpolate(x, size=(23, 20), mode=mode)

            msg = f"channels_last={channels_last} {mode}"
            kernels = self._backward_kernels(step, x, False, msg)
            self.assertEqual(len(kernels), 2, msg=f"{msg}: {sorted(kernels)}")

    def test_one_dim_window_gather_computes_its_positions(self, device):
        """x1.5 contiguous, static and dynamic: the innermost dim's period sums and the outer dim's
        window gather are one kernel, which computes the window positions itself (no table for
        one dim; each position and mask under Inductor's 30 ops, so none is realized); eager's
        gradient."""
        for dynamic, mode in itertools.product((False, True), ("nearest", "nearest-exact")):
            x = torch.randn(2, 3, 20, 22, device=device, requires_grad=True)

            def step(x):
                return torch.nn.functional.interpolate(x, scale_factor=1.5, mode=mode)

            msg = f"dynamic={dynamic} {mode}"
            kernels = self._backward_kernels(step, x, dynamic, msg)
            self.assertEqual(len(kernels), 1, msg=f"{msg}: {sorted(kernels)}")


instantiate_device_type_tests(TestBackwardOpInfo, globals(), only_for=("cpu", "cuda"))
instantiate_device_type_tests(TestBackward, globals(), only_for=("cpu", "cuda"))
instantiate_device_type_tests(TestBackwardKernels, globals(), only_for=("cuda",))

if __name__ == "__main__":
    run_tests()
