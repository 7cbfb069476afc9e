"""The one part of the build pyproject.toml cannot say: configs/ and kernels/, at the
top of the repository, ship inside the package as gnnrun/configs and gnnrun/kernels, so
that an installed gnnrun runs from any directory (gnnrun.resources finds them in
either place). Each folder of configs/ is listed as a package of its own, as setuptools
wants of folders it ships."""

from setuptools import find_namespace_packages, find_packages, setup

# package -> (the repository folder it is made of, the files it ships)
SHIPPED = {"gnnrun.configs": ("configs", "*.yaml"), "gnnrun.kernels": ("kernels", "*.cpp")}

packages = find_packages(include=["gnnrun", "gnnrun.*"])
package_data = {}
for package, (folder, files) in SHIPPED.items():
    for name in [package, *(f"{package}.{sub}" for sub in find_namespace_packages(where=folder))]:
        packages.append(name)
        package_data[name] = [files]

setup(
    packages=packages,
    package_dir={package: folder for package, (folder, _) in SHIPPED.items()},
    package_data=package_data,
)
