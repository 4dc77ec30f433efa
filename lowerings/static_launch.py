"""Inductor's static launcher for the package's own Triton kernels.

The package's Triton kernels (``decomps.triton_repeat``, ``decomps.triton_channel_rows``) reach
the generated code as user-defined Triton kernels (``lowerings.repeat``, ``lowerings.channel_rows``).
Inductor launches its own kernels through its static launcher, and user-defined ones through
Triton's launcher unless ``config.static_launch_user_defined_triton_kernels`` is set (off by
default, torch 2.11-2.15), which costs more host time per launch: a compiled x2 (16, 64, 16000) bf16 forward, host-bound on
an H200, took 42.3 us per call back to back against 38.6 launched statically, with 5 more Python
calls (docs/findings.md, finding 8).

Here a compiled kernel (``CachingAutotuner._precompile_worker``: compiled in this process or in
a compile worker, which runs without the package) whose source is one of the package's kernels
has each compile result checked by Inductor's own test (``StaticTritonCompileResult.
can_statically_launch``) with that switch on for this kernel alone; it launches statically where
the test passes, under the conditions Inductor sets for its own kernels (the static launcher on,
no C++ wrapper, the binary on disk, no launch attributes). Other user-defined kernels launch as
before. The binary is the same, so are the results. A kernel compiled by a worker whose Triton
cache directory is not this process's (``TRITON_CACHE_DIR`` changed while the worker pool ran)
fails the test here, its binary not found, and keeps Triton's launcher.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable

from ._undo import replace_attribute

# Versions whose ``CachingAutotuner._precompile_worker`` and ``StaticTritonCompileResult`` were
# read against this module (2.11 also run on a GPU).
TESTED_TORCH = ((2, 11), (2, 13), (2, 14), (2, 15))

_stock: dict[str, Callable] = {}
log = logging.getLogger(__name__)


def _normalized(source: str) -> str:
    """A kernel's source with its name and whitespace left out: Inductor re-indents the source
    it copies and renames it under ``triton.unique_user_kernel_names``."""
    return " ".join(re.sub(r"^def\s+\w+\s*\(", "def (", source.strip()).split())


@functools.cache
def package_sources() -> frozenset[str]:
    from decomps import triton_channel_rows, triton_repeat

    kernels = (triton_repeat.repeat_rows, triton_repeat.window_sum_rows, triton_channel_rows.channel_rows)
    return frozenset(_normalized(kernel.src) for kernel in kernels)


def is_package_kernel(autotuner) -> bool:
    """Whether a ``CachingAutotuner`` launches one of the package's kernels, as the user-defined
    kernel that ``lowerings.repeat`` emits."""
    from torch._inductor.runtime.hints import HeuristicType

    source = getattr(getattr(autotuner, "fn", None), "src", None)
    return (
        getattr(autotuner, "heuristic_type", None) == HeuristicType.USER_AUTOTUNE
        and isinstance(source, str)
        and _normalized(source) in package_sources()
    )


def launch_statically(autotuner) -> None:
    """Replaces each of the autotuner's compile results that Inductor's test lets launch
    statically, with the switch for user-defined kernels on, by its static result."""
    from torch._inductor import config
    from torch._inductor.runtime.triton_heuristics import StaticTritonCompileResult, TritonCompileResult

    results = []
    with config.patch(static_launch_user_defined_triton_kernels=True):
        for result in autotuner.compile_results:
            launcher = None
            if type(result) is TritonCompileResult:
                try:
                    launcher = StaticTritonCompileResult.can_statically_launch(
                        result.kernel, autotuner.inductor_meta, autotuner.triton_meta, autotuner.heuristic_type
                    )
                except Exception:  # a result not laid out as this module read it: Triton's launcher
                    log.warning("%s keeps Triton's launcher", autotuner.inductor_meta.get("kernel_name"), exc_info=True)
            if launcher is not None:
                result = StaticTritonCompileResult(launcher, result.config, result.compile_meta, autotuner.inductor_meta)
            results.append(result)
    autotuner.compile_results = results


def _precompile_worker(self) -> None:
    """Inductor's ``CachingAutotuner._precompile_worker``; then a package kernel's results
    launch statically where Inductor's test allows."""
    _stock["_precompile_worker"](self)
    if self.compile_results and is_package_kernel(self):
        launch_statically(self)


def missing_hooks() -> list[str]:
    """What this needs from this torch and Triton; without it the kernels launch as before."""
    import torch

    from .versions import torch_release

    if torch_release() not in TESTED_TORCH:
        return [f"torch {torch.__version__} (read for {TESTED_TORCH})"]
    from torch.utils._triton import has_triton

    if not has_triton():
        return ["triton"]
    from torch._inductor import config
    from torch._inductor.runtime import hints, triton_heuristics

    missing = []
    if not hasattr(config, "static_launch_user_defined_triton_kernels"):
        missing.append("config.static_launch_user_defined_triton_kernels")
    if not hasattr(hints.HeuristicType, "USER_AUTOTUNE"):
        missing.append("HeuristicType.USER_AUTOTUNE")
    if not callable(getattr(triton_heuristics.CachingAutotuner, "_precompile_worker", None)):
        missing.append("CachingAutotuner._precompile_worker")
    for name in ("StaticTritonCompileResult", "TritonCompileResult"):
        if not isinstance(getattr(triton_heuristics, name, None), type):
            missing.append(name)
    static = getattr(triton_heuristics, "StaticTritonCompileResult", None)
    if static is not None and not callable(getattr(static, "can_statically_launch", None)):
        missing.append("StaticTritonCompileResult.can_statically_launch")
    return missing


def install() -> Callable[[], None]:
    if missing_hooks():
        return lambda: None
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    _stock["_precompile_worker"] = CachingAutotuner._precompile_worker
    return replace_attribute(CachingAutotuner, "_precompile_worker", _precompile_worker)
