"""lowerings.repeat: a repeat op runs its own kernel as an extern call where nothing would fuse
with it, and lowers to generated code elsewhere; the result is eager's either way.

On CPU the op's kernel is the views (the decompositions take the op on CUDA only:
``kernel_choice.REPEAT_KERNEL_DEVICES``, patched here to reach the lowering on every device).
"""

from __future__ import annotations

from unittest import mock

import torch
import torch.nn.functional as F
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, parametrize, run_tests

import decomps
from decomps import kernel_choice

# The op's kernel in the generated code: on CUDA the Triton kernel (decomps.triton_repeat), elsewhere
# an extern call of the op (comments name the op in either case)
FORWARD = ("def repeat_rows(", "torch.ops.decomps.upsample_repeat.default(")
BACKWARD = ("def window_sum_rows(", "torch.ops.decomps.upsample_repeat_backward.default(")


def _runs(kernel, code: str) -> bool:
    return any(name in code for name in kernel)


def up(x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest")


CONV_WEIGHT = {}


def _conv(y):
    weight = CONV_WEIGHT.setdefault((y.device, y.dtype), torch.ones(3, 3, 1, 1, device=y.device, dtype=y.dtype))
    return F.conv2d(y, weight)


# name: (fn, runs the op's kernel?)
SITES = {
    "alone": (lambda x, b: up(x), True),
    "into a convolution": (lambda x, b: _conv(up(x)), True),
    "fpn merge": (lambda x, b: b + up(x), False),
    "after a relu": (lambda x, b: up(x.relu()), False),
    "unet skip cat": (lambda x, b: torch.cat([b, up(x)], 1), False),
}


def _compiled_code(fn, dynamic, *args):
    torch._dynamo.reset()
    with fresh_inductor_cache():
        out, code = run_and_get_code(torch.compile(fn, dynamic=dynamic, fullgraph=True), *args)
    return out, "\n".join(code)


class TestRepeatLowering(TestCase):
    def setUp(self):
        super().setUp()
        devices = mock.patch.object(kernel_choice, "REPEAT_KERNEL_DEVICES", ("cpu", "cuda"))
        devices.start()
        self.addCleanup(devices.stop)

    @parametrize("dynamic", [False, True])
    @parametrize("site", list(SITES))
    def test_forward_site(self, device, site, dynamic):
        fn, runs_kernel = SITES[site]
        x = torch.randn(2, 3, 8, 16, device=device)
        b = torch.randn(2, 3, 16, 32, device=device)
        out, code = _compiled_code(fn, dynamic, x, b)
        expected = fn(x, b)
        self.assertTrue(torch.equal(out, expected))
        self.assertEqual(out.stride(), expected.stride())
        self.assertEqual(_runs(FORWARD, code), runs_kernel, code)
        if site == "unet skip cat" and torch.device(device).type == "cuda":
            # the repeat writes into its slice of the cat: no kernel selects between inputs
            self.assertNotIn("tl.where", code)

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
        self.assertTrue(_runs(FORWARD, forward_code), forward_code)
        self.assertTrue(_runs(BACKWARD, backward_code), backward_code)

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
        decomps.uninstall()
        try:
            self.assertFalse(any(op in lowerings for op in ops))
        finally:
            decomps.install()


instantiate_device_type_tests(TestRepeatLowering, globals(), only_for=("cpu", "cuda"))

if __name__ == "__main__":
    run_tests()
