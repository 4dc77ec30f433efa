"""repeat_kernels and triton_repeat: the integer-repeat ops give eager's values and strides, in
every kernel they have (the views on CPU, the Triton kernels and their fallback on CUDA)."""

from __future__ import annotations

import itertools
from unittest import mock

import torch
import torch.nn.functional as F
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from decomps import repeat_kernels

# (spatial size, factors): every rank, innermost factors with and without a Triton kernel
CASES = [
    ((7,), (2,)),
    ((5,), (4,)),
    ((6, 9), (2, 2)),
    ((5, 33), (3, 2)),
    ((4, 5), (2, 1)),
    ((3, 300), (1, 2)),
    ((5, 1100), (1, 2)),  # rows of several kernel programs, the last one masked
    ((3, 1001), (1, 4)),  # one row of odd-width rows (triton_repeat.row_shapes), many programs
    ((3, 7), (4, 4)),
    ((2, 3, 5), (2, 2, 2)),
    ((3, 2, 17), (1, 2, 4)),
    ((4, 6, 5), (2, 2, 1)),  # a channels-last 2d repeat as rows of channels (repeats.channels_last_rows)
    ((4, 6), (2, 3)),  # innermost 3: the views, also on CUDA
]
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.uint8)


def _random(shape, dtype, device):
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * 100
    return (x.abs() if dtype == torch.uint8 else x).to(dtype).to(device)


def _eager_forward(x, factors):
    return F.interpolate(x, scale_factor=[float(k) for k in factors], mode="nearest")


def _eager_backward(g, factors):
    n = len(factors)
    input_size = [*g.shape[:2], *(s // k for s, k in zip(g.shape[2:], factors))]
    op = {1: torch.ops.aten.upsample_nearest1d_backward, 2: torch.ops.aten.upsample_nearest2d_backward,
          3: torch.ops.aten.upsample_nearest3d_backward}[n]
    return op(g, list(g.shape[2:]), input_size, *[float(k) for k in factors])


class _Checks(TestCase):
    def _check_forward(self, x, factors, msg):
        actual = repeat_kernels.upsample_repeat(x, list(factors))
        expected = _eager_forward(x, factors)
        self.assertTrue(torch.equal(actual, expected), msg)
        self.assertEqual(actual.stride(), expected.stride(), msg=msg)

    def _check_backward(self, g, factors, msg):
        actual = repeat_kernels.upsample_repeat_backward(g, list(factors))
        expected = _eager_backward(g, factors)
        self.assertEqual(actual.dtype, g.dtype, msg=msg)
        # the same additions in the same order as eager's kernel
        self.assertTrue(torch.equal(actual, expected), msg)
        self.assertEqual(actual.stride(), expected.stride(), msg=msg)
        reference = _eager_backward(g.double(), factors)
        tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(g.dtype, 1e-6)
        torch.testing.assert_close(actual.double(), reference, rtol=tol, atol=tol * 100)


class TestRepeatKernels(_Checks):
    def test_forward_is_eager(self, device):
        for (spatial, factors), dtype, batch in itertools.product(CASES, DTYPES, (2, 0)):
            x = _random((batch, 3, *spatial), dtype, device)
            self._check_forward(x, factors, f"{dtype} {list(x.shape)} x {factors}")

    def test_backward_is_eager(self, device):
        for (spatial, factors), dtype, batch in itertools.product(CASES, DTYPES[:4], (2, 0)):
            g = _random((batch, 3, *(s * k for s, k in zip(spatial, factors))), dtype, device)
            self._check_backward(g, factors, f"{dtype} {list(g.shape)} / {factors}")

    def test_non_contiguous_inputs(self, device):
        # the Triton kernels read rows in place: other strides take the views
        x = _random((2, 3, 12, 16), torch.float32, device)[:, :, ::2, ::2]
        self._check_forward(x, (2, 2), "sliced input")
        g = _random((2, 3, 12, 20), torch.float32, device).transpose(2, 3).contiguous().transpose(2, 3)
        self._check_backward(g, (2, 2), "transposed grad_output")

    def test_opcheck(self, device):
        x = _random((2, 3, 4, 6), torch.float32, device)
        torch.library.opcheck(repeat_kernels.upsample_repeat, (x, [2, 2]))
        g = _random((2, 3, 8, 12), torch.bfloat16, device)
        torch.library.opcheck(repeat_kernels.upsample_repeat_backward, (g, [2, 2]))


class TestTritonRepeat(_Checks):
    """CUDA only: the ops run the Triton kernels where they apply."""

    def test_cuda_runs_the_triton_kernels(self, device):
        from decomps import triton_repeat

        x = _random((2, 3, 8, 16), torch.bfloat16, device)
        with mock.patch.object(triton_repeat, "repeat", wraps=triton_repeat.repeat) as spy:
            self._check_forward(x, (2, 2), "x2")
        self.assertEqual(spy.call_count, 1)
        g = _random((2, 3, 16, 32), torch.bfloat16, device)
        with mock.patch.object(triton_repeat, "sum_repeats", wraps=triton_repeat.sum_repeats) as spy:
            self._check_backward(g, (2, 2), "x2")
        self.assertEqual(spy.call_count, 1)

    def test_row_shapes(self, device):
        """Only the innermost dim repeated: the kernels run over one row, each program taking its
        whole share of it; otherwise the shapes and the per-row config stay."""
        from decomps import triton_repeat

        self.assertEqual(triton_repeat.row_shapes([2, 3, 7], [2, 3, 14], [2]), ([42], [84], [2]))
        self.assertEqual(triton_repeat.row_shapes([2, 3, 5, 7], [2, 3, 5, 28], [1, 4]), ([210], [840], [4]))
        narrow, wide = [2, 3, 5, 7], [2, 3, 10, 14]
        self.assertEqual(triton_repeat.row_shapes(narrow, wide, [2, 2]), (narrow, wide, [2, 2]))
        one_row = triton_repeat.launch_config(84000, [2], True, 2, rows=1)
        self.assertEqual((one_row["ROWS"], one_row["BLOCK_W"]), (1, triton_repeat.FORWARD_BYTES_PER_PROGRAM // 2))
        one_row = triton_repeat.launch_config(84000, [4], False, 4, rows=1)
        self.assertEqual((one_row["ROWS"], one_row["BLOCK_W"]), (1, triton_repeat.BACKWARD_ELEMENTS_PER_PROGRAM))
        rows = triton_repeat.launch_config(84000, [2], True, 2, rows=6)
        self.assertEqual(rows["BLOCK_W"], triton_repeat.MAX_BLOCK_W)

    def test_streaming_stores(self, device):
        from decomps import triton_repeat

        # the rule: forwards writing STREAM_STORE_BYTES or more stream; the backward never does
        threshold = triton_repeat.STREAM_STORE_BYTES
        for out_bytes, stream in ((threshold, True), (threshold - 1, False), (0, False)):
            self.assertEqual(triton_repeat.launch_config(256, [2, 2], True, 4, out_bytes=out_bytes)["STREAM"], stream)
        self.assertNotIn("STREAM", triton_repeat.launch_config(256, [2, 2], False, 4, out_bytes=threshold))
        # streamed stores write eager's values
        for (spatial, factors), dtype in itertools.product(CASES, DTYPES):
            if factors[-1] not in repeat_kernels.TRITON_INNERMOST_FACTORS:
                continue
            x = _random((2, 3, *spatial), dtype, device)
            out = x.new_empty(repeat_kernels.repeated_shape(x.shape, factors))
            config = triton_repeat.launch_config(out.shape[-1], factors, True, x.element_size(), out_bytes=threshold)
            triton_repeat.repeat(x, out, factors, config=config)
            self.assertTrue(torch.equal(out, _eager_forward(x, factors)), f"{dtype} {list(x.shape)} x {factors}")


instantiate_device_type_tests(TestRepeatKernels, globals(), only_for=("cpu", "cuda"))
instantiate_device_type_tests(TestTritonRepeat, globals(), only_for=("cuda",))

if __name__ == "__main__":
    run_tests()
