"""What `pip install .` gives a host that runs the layers: every third-party module the
packages import as a declared runtime dependency, every data file they read in the package;
and what `make setup` installs: a tested version of every declared dependency.

`make setup` installs the dev extras, editable, so a module that only a dev tool
pulls in (httpx was one) imports fine here, and a file read from the checkout
(the Maven pom was one) is found here; both failed on a host that ran
`pip install .`, as the CronJob's image does. These tests read the source and
pyproject.toml, not what happens to be installed.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "speed_layer", "batch_layer", "serving", "lambdaline")
# parts of a declared dependency, versioned by it: Spark's bridge to its JVM
# (pyspark pins its exact version) and the toolkit FastAPI is built on
COMES_WITH = {"py4j": "pyspark", "starlette": "fastapi"}


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distribution(requirement: str) -> str:
    """`uvicorn[standard]>=0.34,<1` -> `uvicorn`."""
    return _normalised(Requirement(requirement).name)


def declared_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_distribution(spec) for spec in project["dependencies"]}


def external_imports(folder: Path) -> dict[str, set[str]]:
    """Module imported (dotted, as written) -> the files under ``folder`` importing it, for
    absolute imports outside the stdlib and the project."""
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in PACKAGES:
                    found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def imported_modules() -> dict[str, set[str]]:
    """Top-level module -> the files importing it, for absolute imports outside the stdlib."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for name, paths in external_imports(ROOT / package).items():
            found.setdefault(name.partition(".")[0], set()).update(paths)
    return found


def test_the_domain_imports_pyspark_sql_and_nothing_else_external() -> None:
    """The contract docs/architecture.md states (import-linter sees a package whole:
    ``pyspark``, not ``pyspark.sql``)."""
    imported = external_imports(ROOT / "shared" / "domain")
    assert "pyspark.sql" in imported  # the reader finds them
    others = {
        name: sorted(paths) for name, paths in imported.items()
        if name != "pyspark.sql" and not name.startswith("pyspark.sql.")
    }  # fmt: skip
    assert others == {}


def test_the_reader_finds_the_imports_it_must() -> None:
    modules = imported_modules()
    assert {"pyspark", "duckdb", "fastapi", "kafka", "httpx2"} <= modules.keys()
    assert "json" not in modules and "shared" not in modules


def test_every_third_party_import_is_a_declared_dependency() -> None:
    declared = declared_dependencies()
    distributions = packages_distributions()
    undeclared = {
        module: sorted(files)
        for module, files in imported_modules().items()
        if module not in COMES_WITH
        and not declared & {_normalised(d) for d in distributions.get(module, [module])}
    }
    assert undeclared == {}, f"imported but not in [project] dependencies: {undeclared}"


def test_what_comes_with_a_dependency_is_one_it_requires() -> None:
    declared = declared_dependencies()
    for module, parent in COMES_WITH.items():
        assert _normalised(parent) in declared
        needs = {_distribution(r) for r in requires(parent) or [] if "extra ==" not in r}
        assert _normalised(module) in needs, f"{parent} no longer requires {module}: declare it"


def test_every_data_file_the_packages_read_ships_in_them() -> None:
    from shared.platform.jvm import POM_PATH
    from shared.platform.spark_session import DRIVER_LOG4J2
    from speed_layer.job import SCHEDULER_POOLS_FILE

    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    for path in (POM_PATH, DRIVER_LOG4J2, SCHEDULER_POOLS_FILE):
        package = ".".join(path.parent.relative_to(ROOT).parts)
        assert package.split(".")[0] in PACKAGES, path
        assert path.is_file() and path.name in package_data[package], path


def constraint_pins() -> dict[str, str]:
    """constraints.txt (written by `make lock`) as distribution -> exact version."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        entry = line.partition("#")[0].strip()
        if entry:
            name, separator, version = entry.partition("==")
            assert separator and version, f"constraints.txt: {line!r} is not name==version"
            pins[_normalised(name)] = version
    return pins


def test_constraints_pin_every_declared_dependency_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [spec for specs in project["optional-dependencies"].values() for spec in specs]
    pins = constraint_pins()
    assert "pyspark" in pins and "lambdaline" not in pins  # the project itself is never pinned
    for spec in [*project["dependencies"], *extras]:
        requirement, name = Requirement(spec), _distribution(spec)
        assert name in pins, f"{name} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {spec!r}: "
            "run `make lock`"
        )
