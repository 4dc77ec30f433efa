"""End to end: torch.compile (Inductor) with the package installed, forward and backward."""

from __future__ import annotations

import itertools
import random
import re

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from tests.common import RANKS, assert_grad_close, assert_same, generated_code, memory_format_of, mode_name
from tests.graphs import post_grad_graphs


def _compile(fn, dynamic):
    torch._dynamo.reset()
    return torch.compile(fn, backend="inductor", dynamic=dynamic, fullgraph=True)


def _input(rank, dtype, channels_last, device, spatial=(10, 9, 8)):
    shape = (2, 5) + spatial[:rank]
    x = torch.randn(shape, device=device) * 40
    x = x.to(dtype) if dtype != torch.uint8 else x.abs().to(dtype)
    return x.contiguous(memory_format=memory_format_of(rank, channels_last))


def _value_and_grad(fn, x):
    """``fn(x)`` and its gradient for a fixed, non-uniform grad_output.

    The gradient is taken outside ``fn``: torch 2.15's Dynamo runs a whole frame that calls
    ``torch.autograd.grad`` in eager (``trace_autograd_ops`` is off), compiling nothing.
    """
    x = x.detach().requires_grad_()
    out = fn(x)
    grad_output = torch.ones_like(out) * torch.arange(out.numel(), device=out.device).view(out.shape).sin()
    (grad,) = torch.autograd.grad(out, x, grad_output)
    return out, grad


class TestCompile(TestCase):
    def test_forward_matrix(self, device):
        """1d/2d/3d x modes x dtypes x layouts x static/dynamic: bit-equal, eager's strides."""
        configs = [(torch.float32, False), (torch.float32, True), (torch.uint8, False),
                   (torch.bfloat16, True), (torch.float64, False), (torch.float16, False)]
        for rank, exact, dynamic in itertools.product(RANKS, (False, True), (False, True)):
            for dtype, channels_last in configs:
                if rank == 1 and channels_last:
                    continue
                if (dtype, channels_last) not in configs[:2] and dynamic:
                    continue  # dtypes share the index path; dynamic is covered by float32
                # Float factors: Dynamo may make an int factor a SymInt, which F.interpolate rejects
                # with stock torch too (torch 2.11 and 2.13).
                for kwargs in ({"scale_factor": 2.0}, {"scale_factor": 1.5}, {"size": (7, 12, 5)[:rank]}):
                    def fn(x):
                        return F.interpolate(x, mode=mode_name(exact), **kwargs)

                    x = _input(rank, dtype, channels_last, device)
                    compiled = _compile(fn, dynamic)
                    msg = f"rank {rank} {mode_name(exact)} {dtype} cl={channels_last} dynamic={dynamic} {kwargs}"
                    assert_same(self, compiled(x), fn(x), msg=msg)
                    if dynamic:  # a second size through the same graph
                        y = _input(rank, dtype, channels_last, device, spatial=(6, 13, 4))
                        assert_same(self, compiled(y), fn(y), msg=msg + " second size")

    def test_dynamic_graph_keeps_eager_rounding_across_sizes(self, device):
        """One dynamic graph per mode, many (isize, osize) pairs: forward and backward as eager.

        The pairs include ones where torch 2.11's ``pointless_convert`` pass, which folds a
        float64 -> float32 -> float64 chain, once moved a row (1234 -> 2345 nearest-exact on
        CUDA; 2280 -> 2204 and 1032 -> 2670 nearest, 1776 -> 1498 nearest-exact on CPU), and
        ones where the CPU generic kernel's nearest-exact map is not the floor of the float32
        product (2 -> 41 and 2 -> 83, output 20 and 41; stock Inductor's compiled forward reads
        input 0 there, eager input 1; docs/findings.md, finding 6).
        """
        rng = random.Random(0)
        pairs = [(1234, 2345), (2280, 2204), (1032, 2670), (1776, 1498), (2, 41), (2, 83)]
        pairs += [(rng.randint(200, 3000), rng.randint(200, 3000)) for _ in range(24)]
        for exact in (False, True):
            def fn(x, size):
                return F.interpolate(x, size=size, mode=mode_name(exact))

            compiled = _compile(fn, dynamic=True)
            for isize, osize in pairs:
                x = torch.randn(1, 2, isize, device=device, requires_grad=True)
                xe = x.detach().clone().requires_grad_()
                out, ref = compiled(x, (osize,)), fn(xe, (osize,))
                msg = f"{mode_name(exact)} {isize} -> {osize}"
                assert_same(self, out, ref, msg=msg)
                grad_output = torch.arange(osize, dtype=torch.float32, device=device).expand(1, 2, osize)
                (grad,), (ref_grad,) = torch.autograd.grad(out, x, grad_output), torch.autograd.grad(ref, xe, grad_output)
                self.assertEqual(grad, ref_grad, rtol=0, atol=0, msg=msg)  # integer sums: exact

    def test_x2_has_no_gather(self, device):
        for rank, exact, dynamic in itertools.product(RANKS, (False, True), (False, True)):
            def fn(x):
                return F.interpolate(x, scale_factor=2.0, mode=mode_name(exact))

            x = _input(rank, torch.float32, False, device)
            compiled = _compile(fn, dynamic)
            with post_grad_graphs() as graphs:
                out = compiled(x)
            assert_same(self, out, fn(x))
            self.assertEqual(graphs.gathers(), [set()], msg=f"rank {rank} dynamic={dynamic}")

    def test_non_integer_ratio_gathers(self, device):
        # The check above must be able to fail: a 1.5x upsample does read through an index
        # (in the generated code; on CPU decomps.kernel_choice may run ATen's kernel here), on
        # CPU with wide vectors through index tables (decomps::index_by_maps).
        def fn(x):
            return F.interpolate(x, scale_factor=1.5, mode="nearest")

        compiled = _compile(fn, False)
        with generated_code(), post_grad_graphs() as graphs:
            compiled(_input(2, torch.float32, False, device))
        self.assertIn(graphs.gathers(), ([{"_unsafe_index"}], [{"index_by_maps"}]))

    def test_backward_matrix(self, device):
        """Training step through F.interpolate / nn.Upsample: a backward without scatter-adds,
        eager's values."""
        cases = [({"scale_factor": 2.0}, None), ({"scale_factor": 1.5}, None),
                 ({"scale_factor": 1.5, "recompute_scale_factor": True}, None),
                 ({"scale_factor": 0.5}, None), ({"size": (7, 13, 5)}, None)]
        for rank, exact, dynamic in itertools.product(RANKS, (False, True), (False, True)):
            for kwargs, _ in cases:
                if "size" in kwargs:
                    kwargs = {"size": kwargs["size"][:rank]}
                module = torch.nn.Upsample(mode=mode_name(exact), **kwargs)

                def fn(x):
                    return module(x) * 3

                x = _input(rank, torch.float32, rank == 2 and exact, device)
                torch._dynamo.reset()
                compiled = torch.compile(fn, backend="inductor", dynamic=dynamic)
                with post_grad_graphs() as graphs:
                    out, grad = _value_and_grad(compiled, x)
                ref_out, ref_grad = _value_and_grad(fn, x)
                msg = f"rank {rank} {mode_name(exact)} dynamic={dynamic} {kwargs}"
                assert_same(self, out, ref_out, msg=msg)
                self.assertEqual(grad.stride(), ref_grad.stride(), msg=msg)
                self.assertEqual(grad, ref_grad, rtol=1e-5, atol=1e-5, msg=msg)
                # a forward and a backward graph, neither adding through an index (a
                # downsample's backward may store to each input: tests/test_backward.py)
                self.assertEqual(graphs.accumulating_scatters(), [set(), set()], msg=msg)

    def test_deterministic_mode_and_bitwise_repeatable(self, device):
        def fn(x):
            return F.interpolate(x, scale_factor=1.5, mode="nearest").square().sum()

        x = _input(2, torch.float32, True, device).requires_grad_()
        torch._dynamo.reset()
        with post_grad_graphs() as graphs:
            torch.use_deterministic_algorithms(True)
            try:
                compiled = torch.compile(fn, backend="inductor")
                grads = [torch.autograd.grad(compiled(x), x)[0] for _ in range(2)]
            finally:
                torch.use_deterministic_algorithms(False)
        self.assertEqual(graphs.scatters(), [set(), set()])
        self.assertTrue(torch.equal(grads[0], grads[1]))
        (expected,) = torch.autograd.grad(fn(x), x)
        self.assertEqual(grads[0], expected, rtol=1e-5, atol=1e-5)

    def test_integer_factor_backward_is_one_kernel(self, device):
        def step(g):
            return torch.ops.aten.upsample_nearest2d_backward(g, [64, 64], [4, 8, 32, 32])

        g = torch.randn(4, 8, 64, 64, device=device)
        torch._dynamo.reset()
        out, (code, *_) = run_and_get_code(torch.compile(step, backend="inductor"), g)
        # Inductor's kernels, or on CUDA the package's Triton kernel (lowerings.repeat)
        kernels = re.findall(r"def (?:triton_\w+|window_sum_rows)\(|extern \"C\"[^\n]*void kernel|cpp_fused_\w+ = ", code)
        self.assertEqual(len(kernels), 1, msg=code)
        self.assertEqual(out, step(g), rtol=1e-6, atol=1e-5)


instantiate_device_type_tests(TestCompile, globals(), only_for=("cpu", "cuda"))

if __name__ == "__main__":
    run_tests()
