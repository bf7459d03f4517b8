"""Packaging that pyproject.toml cannot say: the repository's folders install under the `capeval` namespace, and the
Cython kernels are built at install time.

The top-level folders stay where the design puts them (engine/, adapters/, kernels/, benchmarks/); each installs as
`capeval.<folder>`, and `capeval` itself (the public API, engine/root/) is the only name at the top of site-packages;
its own subpackages live under engine/root/ (capeval.testing: engine/root/testing/). tests/ and cluster/ are not
installed."""
import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

FOLDERS = ("engine", "adapters", "kernels", "benchmarks")
ROOT_PACKAGE_DIR = "engine/root"  # installed as `capeval`, never as `capeval.engine.root`

packages = ["capeval"] + [f"capeval.{name}" for name in find_packages(where=ROOT_PACKAGE_DIR)]
package_dir = {"capeval": ROOT_PACKAGE_DIR}
for folder in FOLDERS:
    package_dir[f"capeval.{folder}"] = folder
    for name in find_packages(include=[folder, f"{folder}.*"], exclude=["engine.root", "engine.root.*"]):
        packages.append(f"capeval.{name}")

extensions = [
    Extension(
        "capeval.kernels._aggregate",
        ["kernels/_aggregate.pyx"],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    ),
]

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"capeval.kernels": ["*.pyx"], "capeval.engine": ["**/*.toml", "**/*.yaml"]},
    ext_modules=cythonize(extensions, language_level=3,
                          compiler_directives={"boundscheck": False, "wraparound": False}),
)
