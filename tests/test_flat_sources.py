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
    """A mutated buffer is an argument while the kernel takes it (loads it, stores it, or both,
    in place), none once the kernel removed it or where it never took it."""
    from types import SimpleNamespace

    from torch._inductor.codegen.common import REMOVED, InplacedBuffer
    from torch._inductor.virtualized import V

    def kernel(mutations, inputs=(), outputs=None, inplace=None, removed=()):
        args = SimpleNamespace(input_buffers=dict.fromkeys(inputs, "in_ptr0"), output_buffers=outputs or {},
                               inplace_buffers=inplace or {}, workspace_args=[])
        return SimpleNamespace(args=args, mutations=set(mutations), removed_buffers=set(removed))

    inplaced = InplacedBuffer("in_out_ptr0", ["buf1", "buf2"])
    with V.set_graph_handler(SimpleNamespace(removed_buffers={"buf9"})):
        assert flat_sources.mutated_arguments(kernel([])) == []
        assert flat_sources.mutated_arguments(kernel(["buf0"])) == []  # a fused cat's buffer
        assert flat_sources.mutated_arguments(kernel(["buf0"], outputs={"buf0": REMOVED})) == []
        assert flat_sources.mutated_arguments(kernel(["buf0"], outputs={"buf0": "out_ptr0"})) == ["out_ptr0"]
        assert flat_sources.mutated_arguments(kernel(["buf0"], inputs=["buf0"])) == ["in_ptr0"]
        assert flat_sources.mutated_arguments(kernel(["buf1"], inplace={"buf1": inplaced})) == ["in_out_ptr0"]
        assert flat_sources.mutated_arguments(kernel(["buf1"], inplace={"buf1": inplaced}, removed=["buf1"])) == []
        assert flat_sources.mutated_arguments(kernel(["buf9"], inplace={"buf9": inplaced})) == []
    # the buffers a flat form is launched with: an in-place one under each of its names
    live = kernel([], inputs=["arg0_1"], outputs={"buf3": REMOVED}, inplace={"buf1": inplaced, "buf2": inplaced,
                                                                             "buf0": REMOVED})
    assert flat_sources._pointers(live.args) == {"arg0_1": "in_ptr0", "buf1": "in_out_ptr0", "buf2": "in_out_ptr0"}
    # the flat kernel's arguments in the tiled kernel's launch: an in-place argument where both
    # update in place; none where only the flat kernel would (its buffers are two tiled arguments)
    tiled = {"arg0_1": "in_ptr0", "buf1": "in_out_ptr0", "buf2": "in_out_ptr0"}
    flat = {"arg0_1": "in_ptr0", "buf1": "in_out_ptr0", "buf2": "in_out_ptr0"}
    assert flat_sources._pointer_map(flat, tiled) == {"in_ptr0": "in_ptr0", "in_out_ptr0": "in_out_ptr0"}
    assert flat_sources._pointer_map(flat, {"arg0_1": "in_ptr0", "buf1": "in_ptr1", "buf2": "out_ptr0"}) is None
    assert flat_sources._pointer_map({"buf7": "in_ptr0"}, tiled) is None  # a buffer the tiled kernel lacks
    assert flat_sources._pointer_map(None, tiled) is None


def test_forms_that_only_write_their_mutated_arguments():
    """A variant's forms are timed by launching them again: only where neither loads an argument
    it mutates."""
    writes = "    tl.store(in_out_ptr0 + (x0), tmp3, xmask)\n"
    reads = "    tmp0 = tl.load(in_out_ptr0 + (x0), xmask)\n" + writes
    assert not flat_sources.loads_any(writes, ["in_out_ptr0"])
    assert flat_sources.loads_any(reads, ["in_out_ptr0"])
    assert not flat_sources.loads_any(reads, [])
    assert not flat_sources.loads_any("    tmp0 = tl.load(in_out_ptr01 + (x0))\n", ["in_out_ptr0"])


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


    def test_backward_flat_forms(self, device):
        """Backward kernels carry their flat form: x1.5's, the innermost dim's sums of periods (a
        cat) fused into the outer dim's window gather, and a window gather that Inductor writes in
        place over a reused buffer (output size about 1.9 times the input's, float32); either form
        of their variants gives the dynamic kernel's gradient, within tolerance of float64 eager."""
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

        # (dtype, tolerance, input size, output size or None for a scale of 1.5)
        cases = ((torch.float16, 5e-3, (20, 30), None), (torch.float32, 1e-5, (123, 134), (234, 255)))
        for (dtype, tolerance, isize, osize), pick in itertools.product(cases, (0, 1)):
            torch._dynamo.reset()
            kwargs = {"scale_factor": 1.5} if osize is None else {"size": (osize[0] + pick, osize[1] + pick)}
            f = lambda x, kwargs: F.interpolate(x, mode="nearest", **kwargs)  # noqa: E731
            c = torch.compile(f, dynamic=True)
            # new sizes for each case: a loaded kernel keeps its variants
            x = torch.randn(2, 3, isize[0], isize[1] + 2 * pick, device=device, dtype=dtype, requires_grad=True)
            g = torch.randn_like(f(x, kwargs))
            step = lambda: torch.autograd.grad(c(x, kwargs), x, g)[0]  # noqa: E731
            choose = lambda launches, args, stream: launches[pick]  # noqa: E731
            with mock.patch.object(size_variants, "compile_flat", counted), \
                    mock.patch.object(size_variants, "_faster", choose), \
                    inductor_config.patch(fx_graph_cache=False), \
                    functorch_config.patch(enable_autograd_cache=False):
                dynamic, code = run_and_get_code(step)  # the first launch: the dynamic kernels
                (backward,) = [source for source in code if "upsample_nearest2d_backward" in source]
                self.assertIn(flat_sources.FLAT, backward)
                for _ in range(size_variants.SPECIALIZE_AT):
                    grad = step()
            self.assertTrue(torch.equal(grad, dynamic))
            x64 = x.detach().double().requires_grad_()
            reference = torch.autograd.grad(f(x64, kwargs), x64, g.double())[0]
            self.assertEqual(grad.double(), reference, atol=tolerance, rtol=tolerance)
        backward = [launch for launch in flats if "backward" in launch.kernel.fn.__name__]
        self.assertGreaterEqual(len(backward), 2 * len(cases))


instantiate_device_type_tests(TestFlatSources, globals(), only_for=("cuda",))
