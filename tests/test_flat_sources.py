"""lowerings.flat_sources: the flat kernel of each tiled dynamic kernel of package nodes,
which its size variants compile and time against the tiled one (lowerings.size_variants)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase

from lowerings import flat_sources, size_variants


def test_packed_sources_are_plain_text():
    source = 'def k(x):\n    return tl.load(x, eviction_policy=\'evict_last\')  # "\\n"\n'
    packed = flat_sources.pack(source)
    # the tiled kernel's source holds it inside a string literal of the generated module
    assert set(packed) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    assert flat_sources.unpack(packed) == source


def test_hooks_present():
    assert flat_sources.missing_hooks() == []


def test_mutated_arguments_as_inductor_names_them():
    """A mutated buffer is an argument's while the kernel takes it (loads it, stores it, or
    both, in place), not once the kernel removed it or never took it; removed in-place buffers
    are no arguments of a flat form either."""
    from types import SimpleNamespace

    from torch._inductor.codegen.common import REMOVED, InplacedBuffer
    from torch._inductor.virtualized import V

    def kernel(mutations, inputs=(), outputs=None, inplace=None, removed=()):
        args = SimpleNamespace(input_buffers=dict.fromkeys(inputs, "in_ptr0"), output_buffers=outputs or {},
                               inplace_buffers=inplace or {}, workspace_args=[])
        return SimpleNamespace(args=args, mutations=set(mutations), removed_buffers=set(removed))

    graph = SimpleNamespace(removed_buffers={"buf9"})
    inplaced = InplacedBuffer("in_out_ptr0", ["buf1", "buf2"])
    with V.set_graph_handler(graph):
        assert not flat_sources.mutates_arguments(kernel([]))
        assert not flat_sources.mutates_arguments(kernel(["buf0"]))  # a fused cat's buffer
        assert not flat_sources.mutates_arguments(kernel(["buf0"], outputs={"buf0": REMOVED}))
        assert flat_sources.mutates_arguments(kernel(["buf0"], outputs={"buf0": "out_ptr0"}))
        assert flat_sources.mutates_arguments(kernel(["buf0"], inputs=["buf0"]))
        assert flat_sources.mutates_arguments(kernel(["buf1"], inplace={"buf1": inplaced}))
        assert not flat_sources.mutates_arguments(kernel(["buf1"], inplace={"buf1": inplaced}, removed=["buf1"]))
        assert not flat_sources.mutates_arguments(kernel(["buf9"], inplace={"buf9": inplaced}))
    # the buffers a flat form is launched with: none while one is live in place
    removed = kernel([], inputs=["arg0_1"], outputs={"buf1": REMOVED, "buf3": "out_ptr1"}, inplace={"buf0": REMOVED})
    assert flat_sources._pointers(removed.args) == {"arg0_1": "in_ptr0", "buf3": "out_ptr1"}
    assert flat_sources._pointers(kernel([], inplace={"buf1": inplaced}).args) is None


class TestFlatSources(TestCase):
    """Compiled with ``dynamic=True`` on CUDA, where the size variants are installed."""

    def test_flat_forms_exact(self, device):
        """Tiled kernels (contiguous rows of runtime length, channels-last outputs of 3 and 16
        channels) carry their flat form, and either form of their variants gives eager's result."""
        import itertools
        from unittest import mock

        from torch._functorch import config as functorch_config
        from torch._inductor import config as inductor_config
        from torch._inductor.utils import run_and_get_code

        flats = []
        stock = size_variants.compile_flat

        def counted(tuner, launch, args):
            flats.append(stock(tuner, launch, args))
            return flats[-1]

        f = lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest")  # noqa: E731
        cases = ((torch.contiguous_format, 3), (torch.channels_last, 3), (torch.channels_last, 16))
        for i, (pick, (memory_format, channels)) in enumerate(itertools.product((0, 1), cases)):
            torch._dynamo.reset()
            c = torch.compile(f, dynamic=True)
            choose = lambda launches, args, stream: launches[pick]  # noqa: E731
            # new sizes for each case; the last fills every block (the flat form without a mask)
            shapes = ((2, channels, 20 + i, 30), (3, channels, 21, 33 + i), (2 + pick, 2 * channels, 64, 64))
            with mock.patch.object(size_variants, "compile_flat", counted), \
                    mock.patch.object(size_variants, "_faster", choose), \
                    mock.patch.object(size_variants, "MAX_VARIANTS", 8), \
                    inductor_config.patch(fx_graph_cache=False), \
                    functorch_config.patch(enable_autograd_cache=False):
                for shape in shapes:
                    x = torch.randn(shape, device=device, dtype=torch.float16).contiguous(memory_format=memory_format)
                    expected = f(x)
                    if shape is shapes[0]:
                        out, (code, *_) = run_and_get_code(c, x)
                        self.assertIn(flat_sources.FLAT, code)
                    for _ in range(size_variants.SPECIALIZE_AT + 1):
                        out = c(x)
                        self.assertEqual(out, expected, atol=0, rtol=0)
                        self.assertEqual(out.stride(), expected.stride())
        self.assertEqual(len(flats), 2 * 3 * len(cases))
        self.assertTrue(any("tl.full([XBLOCK], True, tl.int1)" in launch.kernel.fn.src for launch in flats))
        launched = flats[len(flats) // 2:]  # the second half picked the flat form: autotuned at launch
        self.assertTrue(all(len(launch.kernel.launchers) == 1 for launch in launched))


    def test_backward_flat_form(self, device):
        """The x1.5 backward's kernel, the innermost dim's sums of periods (a cat) fused into the
        outer dim's window gather, carries its flat form too; either form of its variant gives
        the dynamic kernel's gradient, within float16's tolerance of float64 eager."""
        from unittest import mock

        from torch._functorch import config as functorch_config
        from torch._inductor import config as inductor_config
        from torch._inductor.utils import run_and_get_code

        flats = []
        stock = size_variants.compile_flat

        def counted(tuner, launch, args):
            flats.append(stock(tuner, launch, args))
            return flats[-1]

        f = lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest")  # noqa: E731
        for pick in (0, 1):
            torch._dynamo.reset()
            c = torch.compile(f, dynamic=True)
            # new sizes for each case: a loaded kernel keeps its variants
            x = torch.randn(2, 3, 20, 30 + 2 * pick, device=device, dtype=torch.float16, requires_grad=True)
            g = torch.randn(2, 3, 30, 45 + 3 * pick, device=device, dtype=torch.float16)
            step = lambda: torch.autograd.grad(c(x), x, g)[0]  # noqa: E731
            choose = lambda launches, args, stream: launches[pick]  # noqa: E731
            with mock.patch.object(size_variants, "compile_flat", counted), \
                    mock.patch.object(size_variants, "_faster", choose), \
                    inductor_config.patch(fx_graph_cache=False), \
                    functorch_config.patch(enable_autograd_cache=False):
                dynamic, code = run_and_get_code(step)  # the first launch: the dynamic kernel
                (backward,) = [source for source in code if "upsample_nearest2d_backward" in source]
                self.assertIn(flat_sources.FLAT, backward)
                for _ in range(size_variants.SPECIALIZE_AT):
                    grad = step()
            self.assertTrue(torch.equal(grad, dynamic))
            x64 = x.detach().double().requires_grad_()
            reference = torch.autograd.grad(f(x64), x64, g.double())[0]
            self.assertEqual(grad.double(), reference, atol=5e-3, rtol=5e-3)
        self.assertEqual(sum("backward" in launch.kernel.fn.__name__ for launch in flats), 2)


instantiate_device_type_tests(TestFlatSources, globals(), only_for=("cuda",))
