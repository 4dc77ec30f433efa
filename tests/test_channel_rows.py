"""channel_rows, triton_channel_rows and lowerings.channel_rows: the op's map is eager's CUDA map
wherever the op is taken, the op gives eager's values and strides in every kernel
(aten ops, the Triton kernel on CUDA, the pointwise lowering), and the forward decomposition
takes it exactly for CUDA channels-last 2d gathers of few channels over static sizes in 1- and
2-byte dtypes, no output size above its input size."""

from __future__ import annotations

import itertools
from unittest import mock

import torch
import torch.nn.functional as F
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code
from torch._prims_common import suggest_memory_format
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from decomps import channel_rows, eager_rules, index_patterns, kernel_choice
from decomps.index_patterns import Pattern
from perf import cases as perf_cases
from tests.common import explicit_scale_cases, random_size_pairs

CUDA_RULES = [eager_rules.Rule(exact=exact, identity_if_equal=True) for exact in (False, True)]
# (input size, output size, scale_factor or None): up, down, mixed, identity rows, odd sizes, and
# more output rows than one block of the kernel's programs
CASES = [
    ((13, 17), (29, 31), None),
    ((29, 31), (13, 17), None),
    ((7, 40), (21, 9), None),
    ((6, 11), (6, 23), None),
    ((1, 5), (1, 9), None),
    ((9, 700), (19, 1501), None),
    ((8, 10), (12, 15), 1.5),
    ((40, 30), (20, 15), 0.5),
]
DTYPES = (torch.bfloat16, torch.float16, torch.uint8)
# A nearest-exact downsample whose float32 products round up to an integer at column 672 of 1345
# (((672 + 0.5) * float32(2456 / 1345)), 1228 in float32, 1227.99997 in float64)
FLOAT32_ROUNDING_CASE = ((9, 2456), (4, 1345))


def _random(shape, dtype, device, channels_last=True):
    gen = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 100).abs().to(dtype).to(device)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _interpolate(x, size, scale, mode):
    if scale is None:
        return F.interpolate(x, size=size, mode=mode)
    return F.interpolate(x, scale_factor=scale, mode=mode)


def test_source_map_is_eagers_cuda_map():
    """The kernel's float32 formula is eager's CUDA map for every size pair and explicit scale:
    ``kernel_scales`` finds a scale for each, and ``source_map`` with it is eager's map."""
    pairs = [(i, o, None) for i, o in random_size_pairs(300)] + list(explicit_scale_cases())
    for rule, (isize, osize, scale) in itertools.product(CUDA_RULES, pairs):
        scales = channel_rows.kernel_scales([isize], [osize], [scale], rule)
        msg = f"{isize}->{osize} scale {scale} exact {rule.exact}"
        assert scales is not None, msg
        expected = eager_rules.static_source_indices(isize, osize, scale, rule)
        assert channel_rows.source_map(isize, osize, scales[0], rule.exact).tolist() == expected, msg


def test_kernel_scales_declines_other_maps():
    """Where eager's map is not the kernel's formula (CPU's float64 nearest-exact centre shift,
    which rounds some positions the other way), no scale: the decomposition keeps its gather."""
    rule = eager_rules.Rule(exact=True, double=True, centre_shift=True)
    declined = [
        (i, o) for i, o in random_size_pairs(300) if channel_rows.kernel_scales([i], [o], [None], rule) is None
    ]
    assert declined
    for i, o in declined[:20]:
        assert channel_rows.source_map(i, o, eager_rules.forward_scale(i, o, None, True), True).tolist() != (
            eager_rules.static_source_indices(i, o, None, rule)
        )


def test_kernel_choice_rule():
    """The rule's devices only (CUDA), channels-last 4-d, at most FEW_CHANNELS channels, 1- and
    2-byte dtypes, static sizes, the innermost dim gathering, not while exporting."""
    gather, down = [None, None], [3, 4]

    def cl(c, dtype, shape=(4, 5)):
        memory_format = torch.channels_last if len(shape) == 2 else torch.channels_last_3d
        return torch.empty(2, c, *shape, dtype=dtype).contiguous(memory_format=memory_format)

    choice = kernel_choice.channel_rows_kernel
    assert not choice(cl(3, torch.bfloat16), down, gather)  # CPU
    with mock.patch.object(kernel_choice, "CHANNEL_ROWS_KERNEL_DEVICES", ("cpu",)):
        for dtype in DTYPES:
            assert choice(cl(3, dtype), down, gather)
        assert choice(cl(2, torch.bfloat16), down, gather)
        assert choice(cl(3, torch.bfloat16), [4, 4], [Pattern("identity"), None])
        assert choice(cl(3, torch.bfloat16), [3, 6], gather)  # wider rows
        assert choice(cl(3, torch.bfloat16), [8, 4], [Pattern("repeat", 2), None])
        assert not choice(cl(3, torch.float32), down, gather)
        assert not choice(cl(4, torch.bfloat16), down, gather)
        assert not choice(cl(3, torch.bfloat16), [3, 5], [None, Pattern("identity")])
        assert not choice(cl(3, torch.bfloat16).contiguous(), down, gather)
        assert not choice(cl(3, torch.bfloat16, (4, 5, 6)), [3, 4, 5], [None] * 3)
        with mock.patch.object(torch.compiler, "is_exporting", lambda: True):
            assert not choice(cl(3, torch.bfloat16), down, gather)


# The harness's CUDA rows (perf.cases, full matrix) whose static forward takes the op: the
# channels-last 3-channel 16-bit downsample and upsample (``kernel_choice.CHANNEL_ROWS_KERNEL_DEVICES``).
CUDA_OP_ROWS = {
    (batch, dtype, isize, osize)
    for batch in (1, 4) for dtype in ("float16", "bfloat16")
    for isize, osize in (((2345, 2456), (1234, 1345)), ((1234, 1345), (2345, 2456)))
}


def test_choice_for_the_harness_cuda_rows():
    """CUDA's rule (its devices patched to CPU, CUDA's eager rules) over the harness's forward
    rows with static sizes: the op exactly for ``CUDA_OP_ROWS``, each with its kernel scales."""
    taken = set()
    with mock.patch.object(kernel_choice, "CHANNEL_ROWS_KERNEL_DEVICES", ("cpu",)):
        for case in perf_cases.make_cases("cuda", backward=False):
            if case.kind != "interp":
                continue
            layout = getattr(torch, case.memory_format)
            meta = torch.empty(case.shape, device="meta").contiguous(memory_format=layout)
            x = torch.empty_strided(case.shape, meta.stride(), dtype=getattr(torch, case.dtype))
            osize = case.output_shape[2:]
            rule = CUDA_RULES[case.mode == "nearest-exact"] if len(osize) == 2 else None
            if rule is None:
                assert not kernel_choice.channel_rows_kernel(x, osize, [None] * len(osize)), case.name
                continue
            scales = [case.scale_factor] * 2
            patterns = [index_patterns.forward_pattern(i, o, s, rule) for i, o, s in zip(case.shape[2:], osize, scales)]
            if kernel_choice.channel_rows_kernel(x, osize, patterns):
                taken.add((case.shape[0], case.dtype, tuple(case.shape[2:]), tuple(osize)))
                assert channel_rows.kernel_scales(case.shape[2:], osize, scales, rule) is not None, case.name
    assert taken == CUDA_OP_ROWS


def test_float64_products_differ():
    """``FLOAT32_ROUNDING_CASE`` is a size pair where a float64 product of the float32 scale
    (what a float64 kernel argument gives) reads another column than eager's float32 product:
    the compiled CUDA forward of it tells the two apart."""
    (_, isize), (_, osize) = FLOAT32_ROUNDING_CASE
    rule = CUDA_RULES[True]
    (scale,) = channel_rows.kernel_scales([isize], [osize], [None], rule)
    float64 = ((torch.arange(osize, dtype=torch.float64) + 0.5) * scale).to(torch.int64)
    assert float64.tolist() != eager_rules.static_source_indices(isize, osize, None, rule)


class TestChannelRows(TestCase):
    def _check(self, actual, expected, msg):
        self.assertTrue(torch.equal(actual, expected), msg)
        self.assertEqual(actual.stride(), expected.stride(), msg=msg)

    def test_op_is_eager(self, device):
        """The op with kernel_scales' scales: eager's forward, in its default kernel and (CUDA)
        the Triton kernel, batch 0 included."""
        for (isize, osize, scale), exact, dtype, batch in itertools.product(
            CASES, (False, True), DTYPES, (2, 0)
        ):
            mode = "nearest-exact" if exact else "nearest"
            msg = f"{dtype} {[batch, 3, *isize]} -> {osize} {mode}"
            x = _random((batch, 3, *isize), dtype, device)
            rule = CUDA_RULES[exact]
            scales = channel_rows.kernel_scales(isize, osize, [scale, scale], rule)
            actual = channel_rows.gather_channel_rows(x, list(osize), scales, exact)
            h, w = (eager_rules.static_source_indices(i, o, scale, rule) for i, o in zip(isize, osize))
            by_maps = x[:, :, torch.tensor(h, device=device)[:, None], torch.tensor(w, device=device)]
            self._check(actual, by_maps.contiguous(memory_format=suggest_memory_format(x)), msg)
            if device.startswith("cuda"):  # eager's CUDA kernel itself
                self._check(actual, _interpolate(x, None if scale else osize, scale, mode), msg)

    def test_opcheck(self, device):
        x = _random((2, 3, 5, 7), torch.bfloat16, device)
        torch.library.opcheck(channel_rows.gather_channel_rows, (x, [9, 4], [5 / 9, 7 / 4], True))

    def test_compiled_forward(self, device):
        """torch.compile with static sizes takes the op (on CPU with the rule's devices
        patched); standalone the op runs the Triton kernel on CUDA, fused with a user the
        pointwise lowering; eager's values and strides either way."""
        import lowerings.channel_rows as lowering

        devices = ("cuda",) if device.startswith("cuda") else (device.split(":")[0],)
        for (isize, osize), mode, fused in itertools.product(
            (((29, 31), (13, 17)), ((13, 17), (29, 31))), ("nearest", "nearest-exact"), (False, True)
        ):
            x = _random((2, 3, *isize), torch.bfloat16, device)
            msg = f"{isize}->{osize} {mode} fused {fused}"

            def fn(t):
                y = F.interpolate(t, size=osize, mode=mode)
                return y * 2 if fused else y

            torch._dynamo.reset()
            with fresh_inductor_cache(), mock.patch.object(kernel_choice, "CHANNEL_ROWS_KERNEL_DEVICES", devices), \
                    mock.patch.object(lowering, "_pointwise", wraps=lowering._pointwise) as pointwise, \
                    mock.patch.object(channel_rows, "kernel_scales", wraps=channel_rows.kernel_scales) as scales:
                actual, code = run_and_get_code(torch.compile(fn, dynamic=False), x)
            self._check(actual, fn(x), msg)
            self.assertEqual(scales.call_count, 1, msg)
            triton_kernel = any("def channel_rows(" in c for c in code)
            self.assertEqual(triton_kernel, device.startswith("cuda") and not fused, msg)
            self.assertEqual(pointwise.call_count, int(not triton_kernel), msg)

    def test_dynamic_sizes_keep_the_gather(self, device):
        x = _random((2, 3, 13, 17), torch.bfloat16, device)
        torch._dynamo.reset()
        with mock.patch.object(kernel_choice, "CHANNEL_ROWS_KERNEL_DEVICES", (torch.device(device).type,)), \
                mock.patch.object(channel_rows, "kernel_scales", wraps=channel_rows.kernel_scales) as scales:
            fn = torch.compile(lambda t: F.interpolate(t, scale_factor=1.7, mode="nearest"), dynamic=True)
            self._check(fn(x), F.interpolate(x, scale_factor=1.7, mode="nearest"), "dynamic")
        self.assertEqual(scales.call_count, 0)


class TestTritonChannelRows(TestCase):
    """CUDA only: the launch configuration, and the kernel over many programs."""

    def test_float64_arguments(self, device):
        """Inductor passes the scales as float64 arguments; the kernel's products are eager's
        float32 ones (``FLOAT32_ROUNDING_CASE``, ``test_float64_products_differ``)."""
        isize, osize = FLOAT32_ROUNDING_CASE
        x = _random((2, 3, *isize), torch.bfloat16, device)
        fn = torch.compile(lambda t: F.interpolate(t, size=osize, mode="nearest-exact"), dynamic=False)
        torch._dynamo.reset()
        with fresh_inductor_cache():
            actual, code = run_and_get_code(fn, x)
        self.assertTrue(any("def channel_rows(" in c for c in code))
        expected = F.interpolate(x, size=osize, mode="nearest-exact")
        self.assertTrue(torch.equal(actual, expected))
        self.assertEqual(actual.stride(), expected.stride())

    def test_launch_config(self, device):
        """The output row's alignment in elements, up to a 16-byte store; rows per program by
        whether an output size is larger than the input's."""
        from decomps import triton_channel_rows as k

        align = {(w, itemsize): k.launch_config(3, True, (5, 5000), (5, w), itemsize)["ALIGN"]
                 for w in (2456, 1345, 32, 2) for itemsize in (1, 2)}
        self.assertEqual(align, {(2456, 1): 8, (2456, 2): 8, (1345, 1): 1, (1345, 2): 1,
                                 (32, 1): 16, (32, 2): 8, (2, 1): 2, (2, 2): 2})
        up, down = k.UPSAMPLE_BLOCK[0], k.BLOCK[0]
        rows = {(isize, osize): k.launch_config(3, False, isize, osize, 2)["ROWS"]
                for isize, osize in (((1234, 1345), (2345, 2456)), ((2345, 2456), (1234, 1345)), ((7, 7), (7, 7)),
                                     ((2345, 1345), (1234, 2456)), ((1234, 2456), (2345, 1345)))}
        self.assertEqual(rows, {((1234, 1345), (2345, 2456)): up, ((2345, 2456), (1234, 1345)): down,
                                ((7, 7), (7, 7)): down, ((2345, 1345), (1234, 2456)): up,
                                ((1234, 2456), (2345, 1345)): up})

    def test_large_rows(self, device):
        """Many programs; output rows of 7368 elements, aligned to 8 (``ALIGN``); 3 * 517 output
        rows, not a multiple of an upsample's rows per program, and a downsample's."""
        x = _random((3, 3, 301, 1345), torch.bfloat16, device)
        for osize, mode in itertools.product(((517, 2456), (173, 2456), (173, 1001)), ("nearest", "nearest-exact")):
            expected = F.interpolate(x, size=osize, mode=mode)
            rule = CUDA_RULES[mode == "nearest-exact"]
            scales = channel_rows.kernel_scales([301, 1345], list(osize), [None, None], rule)
            actual = channel_rows.gather_channel_rows(x, list(osize), scales, mode == "nearest-exact")
            self.assertTrue(torch.equal(actual, expected), f"{osize} {mode}")


instantiate_device_type_tests(TestChannelRows, globals(), only_for=("cpu", "cuda"))
instantiate_device_type_tests(TestTritonChannelRows, globals(), only_for=("cuda",))

if __name__ == "__main__":
    run_tests()
