"""Indexing past 2**31 elements: compiled results equal eager's, static and dynamic.

The CPU run compiles a uint8 forward whose output has 2**31 + 4633 elements (about 2.1 GB).
The CUDA run adds a bfloat16 forward+backward whose grad_output has 2 * 46342**2 (about 4.3e9)
elements, past 2**32 as well: Inductor must index it with int64 and our window sums must not
wrap. grad_output holds small integers, so every window sum is exact in float32 and the
gradients can be compared bit for bit.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, parametrize, run_tests

import decomps  # noqa: F401  (installs)

INT32_MAX = 2**31 - 1
# Under pytest-xdist (scripts/test.sh) these tests share one worker: each holds gigabytes.
pytestmark = pytest.mark.xdist_group("large_tensors")


def _compiled(fn, dynamic: bool):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, dynamic=dynamic)


class TestLargeForward(TestCase):
    @parametrize("dynamic", [False, True])
    def test_uint8_output_past_2_31_elements(self, device, dynamic):
        osize = 46341  # 46341**2 = 2**31 + 4633
        x = torch.randint(0, 256, (1, 1, 1000, 997), dtype=torch.uint8, device=device)
        fn = lambda x: F.interpolate(x, size=(osize, osize), mode="nearest")  # noqa: E731
        y = _compiled(fn, dynamic)(x)
        self.assertGreater(y.numel(), INT32_MAX)
        e = fn(x)
        self.assertEqual(y.stride(), e.stride())
        self.assertTrue(torch.equal(y[..., -2:, :], e[..., -2:, :]))  # the elements past 2**31
        self.assertTrue(torch.equal(y, e))


class TestLargeBackward(TestCase):
    @parametrize("dynamic", [False, True])
    @parametrize("exact", [False, True])
    def test_bfloat16_grad_output_past_2_32_elements(self, device, dynamic, exact):
        mode = "nearest-exact" if exact else "nearest"
        size = 23171  # output (1, 2, 46342, 46342): 4.3e9 elements
        x = torch.randn(1, 2, size, size, dtype=torch.bfloat16, device=device)
        fn = lambda x: F.interpolate(x, scale_factor=2.0, mode=mode)  # noqa: E731
        compiled = _compiled(fn, dynamic)
        xc = x.clone().requires_grad_()
        y = compiled(xc)
        self.assertGreater(y.numel(), 2 * INT32_MAX)
        grad_output = torch.randint(-4, 5, y.shape, dtype=torch.int8, device=device).to(torch.bfloat16)
        del y
        (grad,) = torch.autograd.grad(compiled(xc), xc, grad_output)
        xe = x.clone().requires_grad_()
        (expected,) = torch.autograd.grad(fn(xe), xe, grad_output)
        self.assertEqual(grad.stride(), expected.stride())
        self.assertTrue(torch.equal(grad[..., -2:, :], expected[..., -2:, :]))
        self.assertTrue(torch.equal(grad, expected))


instantiate_device_type_tests(TestLargeForward, globals(), only_for=("cpu", "cuda"))
# 8.6 GB of grad_output, twice: the GPU run only (the CPU machine has 24 GB and 2 cores).
instantiate_device_type_tests(TestLargeBackward, globals(), only_for=("cuda",))

if __name__ == "__main__":
    run_tests()
