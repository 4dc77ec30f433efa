"""lowerings.repeat: on CUDA a repeat op runs the package's Triton kernel where nothing would
fuse with it, and lowers to generated code elsewhere; a cat of a repeat and buffers is written by
the Triton kernels (``lowerings.repeat.cat``); on CPU the op is generated code whose loads run in
order; the result is eager's everywhere.
"""

from __future__ import annotations

import itertools
import re
from unittest import mock

import torch
import torch.nn.functional as F
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, parametrize, run_tests

import decomps

# The op's Triton kernel (decomps.triton_repeat) in the generated code
FORWARD = "def repeat_rows("
BACKWARD = "def window_sum_rows("


def _runs(kernel, code: str) -> bool:
    return kernel in code


def up(x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest")


def up1d(x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest-exact")


CONV_WEIGHT = {}


def _conv(y):
    key = (y.device, y.dtype, y.shape[1])
    weight = CONV_WEIGHT.setdefault(key, torch.ones(3, y.shape[1], 1, 1, device=y.device, dtype=y.dtype))
    return F.conv2d(y, weight)


# name: (fn, whether the Triton kernel runs on CUDA, whether the C++ code's loads run in order:
# no element-by-element buffer, whatever vector width the backend picks)
SITES = {
    "alone": (lambda x, b: up(x), True, True),
    "into a convolution": (lambda x, b: _conv(up(x)), True, None),
    # on CPU the rows repeated apart, then the add reading them in order
    "fpn merge": (lambda x, b: b + up(x), False, True),
    "after a relu": (lambda x, b: up(x.relu()), False, True),
    # the Triton kernel writes into its slice of the cat (lowerings.repeat.cat)
    "unet skip cat": (lambda x, b: torch.cat([b, up(x)], 1), True, None),
}


def _compiled_code(fn, dynamic, *args):
    torch._dynamo.reset()
    with fresh_inductor_cache():
        out, code = run_and_get_code(torch.compile(fn, dynamic=dynamic, fullgraph=True), *args)
    return out, "\n".join(code)


class TestRepeatLowering(TestCase):
    @parametrize("dynamic", [False, True])
    @parametrize("site", list(SITES))
    def test_forward_site(self, device, site, dynamic):
        fn, triton, in_order = SITES[site]
        x = torch.randn(2, 3, 8, 16, device=device)
        b = torch.randn(2, 3, 16, 32, device=device)
        out, code = _compiled_code(fn, dynamic, x, b)
        expected = fn(x, b)
        self.assertTrue(torch.equal(out, expected))
        self.assertEqual(out.stride(), expected.stride())
        cuda = torch.device(device).type == "cuda"
        self.assertEqual(_runs(FORWARD, code), triton and cuda, code)
        if not cuda and in_order is not None:
            self.assertEqual("tmpbuf" not in code, in_order, code)
        if site == "unet skip cat":
            # the repeat is written into its slice of the cat: no kernel selects between inputs
            self.assertNotIn("tl.where", code)

    @parametrize("dynamic", [False, True])
    def test_rows_only_static(self, device, dynamic):
        """A static repeat of the innermost dim alone whose output rows are whole 16-byte vectors
        is generated code, also where nothing fuses; with symbolic sizes, rows of a partial
        vector, or ``ROWS_ONLY_STATIC_TRITON``, the Triton kernel on CUDA, over one row
        (``triton_repeat.row_shapes``) where the sizes are static."""
        from lowerings import repeat

        cuda = torch.device(device).type == "cuda"
        for width, flag in itertools.product((40, 41), (False, True)):  # rows of 320 and 328 bytes
            x = torch.randn(2, 3, width, device=device)
            with mock.patch.object(repeat, "ROWS_ONLY_STATIC_TRITON", flag):
                if cuda:
                    from decomps import triton_repeat

                    with mock.patch.object(triton_repeat, "row_shapes", wraps=triton_repeat.row_shapes) as spy:
                        out, code = _compiled_code(up1d, dynamic, x)
                else:
                    out, code = _compiled_code(up1d, dynamic, x)
            expected = up1d(x)
            self.assertTrue(torch.equal(out, expected))
            self.assertEqual(out.stride(), expected.stride())
            triton = cuda and (dynamic or flag or width == 41)
            self.assertEqual(_runs(FORWARD, code), triton, code)
            if cuda:  # the lowering's launch over one row; none with symbolic sizes
                self.assertEqual(spy.call_count > 0, triton and not dynamic, code)
        # the backward (window_sum_rows over one row where the sizes are static): eager's values
        x = torch.randn(2, 3, 41, device=device, requires_grad=True)
        g = torch.randn(2, 3, 82, device=device)
        torch._dynamo.reset()
        (actual,) = torch.autograd.grad(torch.compile(up1d, dynamic=dynamic, fullgraph=True)(x), x, g)
        (expected,) = torch.autograd.grad(up1d(x), x, g)
        self.assertTrue(torch.equal(actual, expected))

    @parametrize("dynamic", [False, True])
    def test_backward_alone(self, device, dynamic):
        x = torch.randn(2, 3, 8, 16, device=device, requires_grad=True)
        g = torch.randn(2, 3, 16, 32, device=device)
        torch._dynamo.reset()
        compiled = torch.compile(up, dynamic=dynamic, fullgraph=True)
        with fresh_inductor_cache():
            _, (forward_code, backward_code) = run_and_get_code(
                lambda: torch.autograd.grad(compiled(x), x, g)
            )
        (actual,) = torch.autograd.grad(compiled(x), x, g)
        (expected,) = torch.autograd.grad(up(x), x, g)
        self.assertTrue(torch.equal(actual, expected))
        cuda = torch.device(device).type == "cuda"
        self.assertEqual(_runs(FORWARD, forward_code), cuda, forward_code)
        self.assertEqual(_runs(BACKWARD, backward_code), cuda, backward_code)

    @parametrize("dynamic", [False, True])
    def test_channels_last(self, device, dynamic):
        # a channels-last repeat runs the op over (N, H, W, C) rows; eager's strides come back
        x = torch.randn(2, 3, 8, 16, device=device).contiguous(memory_format=torch.channels_last)
        x.requires_grad_(True)
        g = torch.randn(2, 3, 16, 32, device=device).contiguous(memory_format=torch.channels_last)
        torch._dynamo.reset()
        compiled = torch.compile(up, dynamic=dynamic, fullgraph=True)
        with fresh_inductor_cache():
            (out, actual), (forward_code, backward_code) = run_and_get_code(
                lambda: (lambda y: (y, torch.autograd.grad(y, x, g)[0]))(compiled(x))
            )
        expected = up(x)
        (expected_grad,) = torch.autograd.grad(expected, x, g)
        for a, e in ((out, expected), (actual, expected_grad)):
            self.assertTrue(torch.equal(a, e))
            self.assertEqual(a.stride(), e.stride())
        cuda = torch.device(device).type == "cuda"
        self.assertEqual(_runs(FORWARD, forward_code), cuda, forward_code)
        self.assertEqual(_runs(BACKWARD, backward_code), cuda, backward_code)

    def test_backward_fused_with_its_producer(self, device):
        # grad_output = g * 2 is a pointwise node the backward's generated code reads inline
        x = torch.randn(2, 3, 8, 16, device=device)
        g = torch.randn(2, 3, 16, 32, device=device)

        def fn(g):
            return torch.ops.decomps.upsample_repeat_backward(g * 2, [2, 2])

        out, code = _compiled_code(fn, False, g)
        expected = torch.ops.aten.upsample_nearest2d_backward(g * 2, [16, 32], list(x.shape), 2.0, 2.0)
        self.assertTrue(torch.equal(out, expected))
        self.assertFalse(_runs(BACKWARD, code), code)

    def test_uninstall_removes_the_lowerings(self, device):
        from torch._inductor.lowering import lowerings

        ops = (torch.ops.decomps.upsample_repeat.default, torch.ops.decomps.upsample_repeat_backward.default)
        self.assertTrue(all(op in lowerings for op in ops))
        with decomps.disabled():
            self.assertFalse(any(op in lowerings for op in ops))


# name: (fn of (x, b, c), inputs the Triton kernels write on CUDA; 0: Inductor's cat)
CATS = {
    "channels": (lambda x, b, c: torch.cat([b, up(x)], 1), 2),
    "repeat first": (lambda x, b, c: torch.cat([up(x), b], 1), 2),
    "three inputs": (lambda x, b, c: torch.cat([b, up(x), c], 1), 3),
    "batch": (lambda x, b, c: torch.cat([up(x), b], 0), 2),
    "rows": (lambda x, b, c: torch.cat([up(x), b], 2), 2),
    "columns": (lambda x, b, c: torch.cat([up(x), b], -1), 2),
    "into a convolution": (lambda x, b, c: _conv(torch.cat([b, up(x)], 1)), 2),
    "repeat of a product": (lambda x, b, c: torch.cat([up(x), up(x * 2)], 1), 0),
    "skip from a relu": (lambda x, b, c: torch.cat([b.relu(), up(x)], 1), 0),
    "channels_last skip": (lambda x, b, c: torch.cat([b.contiguous(memory_format=torch.channels_last), up(x)], 1),
                           0),
    "other dtype": (lambda x, b, c: torch.cat([b.double(), up(x)], 1), 0),
    "into a relu": (lambda x, b, c: torch.cat([b, up(x)], 1).relu(), 0),
}
# the other input of each cat, when not (2, 3, 16, 32)
OTHER_SHAPES = {"batch": (3, 3, 16, 32), "rows": (2, 3, 7, 32), "columns": (2, 3, 16, 9)}


class TestRepeatCat(TestCase):
    """CUDA: a cat of a repeat op and buffers is written by the Triton kernels, one per input
    (lowerings.repeat.cat); every other cat is Inductor's, with the same values."""

    @parametrize("dynamic", [False, True])
    @parametrize("case", list(CATS))
    def test_cat(self, device, case, dynamic):
        fn, written = CATS[case]
        x = torch.randn(2, 3, 8, 16, device=device, dtype=torch.bfloat16)
        b = torch.randn(OTHER_SHAPES.get(case, (2, 3, 16, 32)), device=device, dtype=torch.bfloat16)
        c = torch.randn(2, 5, 16, 32, device=device, dtype=torch.bfloat16)
        out, code = _compiled_code(fn, dynamic, x, b, c)
        expected = fn(x, b, c)
        self.assertTrue(torch.equal(out, expected))
        self.assertEqual(out.stride(), expected.stride())
        # one launch of repeat_rows per input of the cat (a row copy for the buffers)
        launches = len(re.findall(r"repeat_rows\w*\.run\(", code))
        self.assertEqual(launches, written if torch.device(device).type == "cuda" else 0, code)

    def test_other_sizes(self, device):
        # the slices' sizes and offsets are kernel arguments: odd sizes take the masks
        fn = CATS["channels"][0]
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        compiled = torch.compile(fn, dynamic=True, fullgraph=True)
        for n, c, h, w in ((2, 3, 5, 12), (3, 5, 6, 10), (4, 7, 9, 7)):
            x = torch.randn(n, c, h, w, device=device)
            b = torch.randn(n, c + 1, 2 * h, 2 * w, device=device)
            self.assertTrue(torch.equal(compiled(x, b, None), fn(x, b, None)))
        # at most one recompile, for an alignment condition (docs/design.md)
        self.assertLessEqual(torch._dynamo.utils.counters["stats"]["unique_graphs"], 2)

    def test_backward_through_the_cat(self, device):
        x = torch.randn(2, 3, 8, 16, device=device, requires_grad=True)
        b = torch.randn(2, 3, 16, 32, device=device, requires_grad=True)
        g = torch.randn(2, 6, 16, 32, device=device)
        fn = CATS["channels"][0]
        torch._dynamo.reset()
        actual = torch.autograd.grad(torch.compile(fn, dynamic=True, fullgraph=True)(x, b, None), (x, b), g)
        expected = torch.autograd.grad(fn(x, b, None), (x, b), g)
        for a, e in zip(actual, expected):
            self.assertTrue(torch.equal(a, e))


class TestStreamingStores(TestCase):
    """CUDA: the forward kernel's stores stream from ``triton_repeat.STREAM_STORE_BYTES`` of the
    output its launch writes (a cat's slice: that slice), with eager's values."""

    @parametrize("dynamic", [False, True])
    @parametrize("site", ["alone", "unet skip cat"])
    def test_stores(self, device, site, dynamic):
        from decomps import triton_repeat

        fn = SITES[site][0]
        x = torch.randn(2, 3, 8, 16, device=device, dtype=torch.bfloat16)
        b = torch.randn(2, 3, 16, 32, device=device, dtype=torch.bfloat16)
        written = 2 * 3 * 16 * 32 * 2  # bytes of the repeat's output, and of the copied skip
        original = triton_repeat.launch_config
        for threshold, stream in ((written, True), (written + 1, False)):
            configs = []

            def launch_config(*args, **kwargs):
                configs.append(original(*args, **kwargs))
                return configs[-1]

            with mock.patch.object(triton_repeat, "STREAM_STORE_BYTES", threshold), \
                 mock.patch.object(triton_repeat, "launch_config", launch_config):
                out, code = _compiled_code(fn, dynamic, x, b)
            self.assertTrue(torch.equal(out, fn(x, b)))
            self.assertTrue(_runs(FORWARD, code), code)
            self.assertEqual([c["STREAM"] for c in configs], [stream] * (1 if site == "alone" else 2))


instantiate_device_type_tests(TestRepeatLowering, globals(), only_for=("cpu", "cuda"))
instantiate_device_type_tests(TestRepeatCat, globals(), only_for=("cpu", "cuda"))
instantiate_device_type_tests(TestStreamingStores, globals(), only_for=("cuda",))

if __name__ == "__main__":
    run_tests()
