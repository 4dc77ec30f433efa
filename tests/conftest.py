import os

# Keep the kernels that pytest runs compile apart from a user's own cache.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.getcwd(), ".pytest_cache", "inductor"))

import decomps  # noqa: E402,F401  (installs)
