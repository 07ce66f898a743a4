"""Helpers NeMo Gym's sandbox users call (`nemo_gym.sandbox.utils`)."""

from __future__ import annotations

# Variables that size worker pools; set to a sandbox's cpu limit so tools that count the host's
# cores (Python, BLAS, OpenMP, Go, cargo, pytest-xdist, ...) do not oversubscribe it.
CPU_CAP_ENV_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS", "OMP_THREAD_LIMIT", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "PYTHON_CPU_COUNT", "NUMBA_NUM_THREADS", "LOKY_MAX_CPU_COUNT",
    "POLARS_MAX_THREADS", "PYTEST_XDIST_AUTO_NUM_WORKERS", "DJANGO_TEST_PROCESSES", "GOMAXPROCS",
    "CARGO_BUILD_JOBS", "RAYON_NUM_THREADS", "RUST_TEST_THREADS", "UV_THREADPOOL_SIZE", "CMAKE_BUILD_PARALLEL_LEVEL",
)


def cpu_cap_env(cpu: float | int | None) -> dict[str, str]:
    if cpu is None:
        return {}
    return dict.fromkeys(CPU_CAP_ENV_VARS, str(max(1, int(cpu))))


def rewrite_image(image: str | None, rewrites: list[dict[str, str]]) -> str | None:
    """The first rewrite whose `from` prefixes the image replaces that prefix with its `to`."""
    if image is None:
        return None
    for rewrite in rewrites:
        if image.startswith(rewrite["from"]):
            return rewrite["to"] + image[len(rewrite["from"]):]
    return image
