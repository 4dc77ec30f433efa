"""The package's Triton kernels launch through their launcher, without ``CachingAutotuner.run``.

Torch 2.11's ``CachingAutotuner.run`` does the same work before every launch: it asks for a
``DebugMode``, defines an allocator and hands it to Triton, checks the launcher count, the
coordinate-descent flag, the cubin and dump flags and the profiler, and only then calls its one
launcher: 5 Python calls per launch. On an H200, a compiled forward whose kernels finish before
the host has launched them took 3.7-4.8 us less per call without it, back to back
(docs/findings.md, finding 8). Torch 2.13 and later cache the launcher after a kernel's
first launch and skip that work on later ones (``CachingAutotuner._cached_launcher``), for every
kernel.

Here, on torch 2.11, a kernel that holds the package's nodes (``package_kernels.PACKAGE`` in its
``inductor_meta``) or is one of its own Triton kernels (``static_launch.is_package_kernel``) does
the same: after a launch through ``run`` that left it one launcher with nothing to save, dump or
tune, later launches call that launcher, except under the profiler or a ``DebugMode`` (which
``run`` tells which kernel launches) or with keyword arguments (a benchmark run). The launcher
and its arguments are ``run``'s, so are the results. Kernels with size variants
(``size_variants``) launch theirs directly already; other kernels launch as before.
"""

from __future__ import annotations

from collections.abc import Callable

from ._undo import replace_attribute

# Versions whose ``CachingAutotuner.run`` was read against this module; 2.13, 2.14 and 2.15 cache
# the launcher themselves.
TESTED_TORCH = ((2, 11),)

_stock: dict[str, Callable] = {}
_classes: dict[type, type] = {}


def launcher_alone(tuner) -> Callable | None:
    """``tuner``'s launcher where ``run`` would only call it (one launcher, tuned, no cubin to
    save, no launch to dump, not interpreted); None otherwise."""
    launchers = getattr(tuner, "launchers", None)
    if not launchers or len(launchers) != 1 or getattr(launchers[0], "store_cubin", True):
        return None
    if any(getattr(tuner, flag, False) for flag in ("dump_launch_params", "dump_launch_tensors", "triton_interpret")):
        return None
    meta = getattr(tuner, "inductor_meta", None) or {}
    if meta.get("coordinate_descent_tuning") and not getattr(launchers[0].config, "found_by_coordesc", False):
        return None
    return launchers[0]


def _new(cls: type):
    return cls.__new__(cls)


def kernel_subclass(base: type, prefix: str, run: Callable, private: str) -> type:
    """A subclass of the kernel class ``base`` with its own ``run``, which keeps launchers in the
    attribute ``private``. Its copies and pickles (Inductor's cache of statically launched kernels
    deep-copies a loaded kernel) are ``base`` instances without it: launchers do not pickle."""

    def __reduce_ex__(self, protocol):
        state = {k: v for k, v in self.__getstate__().items() if k != private}
        return (_new, (base,), state)

    return type(f"{prefix}{base.__name__}", (base,), {"run": run, "__reduce_ex__": __reduce_ex__, "__module__": __name__})


def launch_class(base: type) -> type:
    """``base`` whose ``run`` calls its launcher directly once a launch through ``base.run``
    has left it ``launcher_alone``."""
    if base not in _classes:
        from torch._inductor.runtime import triton_heuristics
        from torch.autograd import profiler

        debug_mode = getattr(triton_heuristics, "get_active_debug_mode", lambda: None)

        def run(self, *args, stream, **kwargs):
            launch = self._decomps_launch
            if launch is not None and not kwargs and not profiler._is_profiler_enabled and not debug_mode():
                launchers = self.launchers
                if len(launchers) == 1 and launchers[0] is launch:
                    return launch(*args, stream=stream)
            result = base.run(self, *args, stream=stream, **kwargs)
            if not kwargs and not profiler._is_profiler_enabled and not debug_mode():
                self._decomps_launch = launcher_alone(self)
            return result

        _classes[base] = kernel_subclass(base, "CachedLaunch", run, "_decomps_launch")
    return _classes[base]


def is_package_kernel(tuner) -> bool:
    """Whether a loaded kernel holds the package's nodes or is one of its Triton kernels."""
    from . import static_launch
    from .package_kernels import PACKAGE

    meta = getattr(tuner, "inductor_meta", None) or {}
    return bool(meta.get(PACKAGE)) or static_launch.is_package_kernel(tuner)


def precompile(self, *args, **kwargs):
    """Inductor's ``CachingAutotuner.precompile``; then a package kernel that launches through
    ``run`` (no size variants) caches its launcher."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    result = _stock["precompile"](self, *args, **kwargs)
    if type(self) is CachingAutotuner and self.launchers and is_package_kernel(self):
        self._decomps_launch = None
        self.__class__ = launch_class(CachingAutotuner)
    return result


def missing_hooks() -> list[str]:
    """What this needs from this torch and Triton; without it the kernels launch through ``run``."""
    import torch

    from .versions import torch_release

    if torch_release() not in TESTED_TORCH:
        return [f"torch {torch.__version__} (read for {TESTED_TORCH})"]
    from torch.utils._triton import has_triton

    if not has_triton():
        return ["triton"]
    from torch._inductor.runtime import triton_heuristics

    autotuner = triton_heuristics.CachingAutotuner
    return [f"CachingAutotuner.{name}" for name in ("precompile", "run") if not callable(getattr(autotuner, name, None))]


def install() -> Callable[[], None]:
    """Installed after ``size_variants``, whose ``precompile`` gives a kernel its class first."""
    if missing_hooks():
        return lambda: None
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    _stock["precompile"] = CachingAutotuner.precompile
    return replace_attribute(CachingAutotuner, "precompile", precompile)
