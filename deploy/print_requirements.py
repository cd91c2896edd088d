"""Print the pinned requirement lines an image needs, one per line, from the repository's pins.

    python deploy/print_requirements.py requirements.txt pyproject.toml [EXTRA ...]

The images install exactly the versions CI tests (requirements.txt) but only the packages the
package declares for itself (pyproject.toml ``[project].dependencies``, plus the named
``[project.optional-dependencies]`` extras), so the service image carries no test tools and no
Spark. Runs before the code is copied in, so the dependency layer is reused across code changes.
Fails (exit 1) when a declared dependency has no exact pin, so an image never floats.
"""

from __future__ import annotations

import re
import sys
import tomllib

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str]) -> int:
    requirements_path, pyproject_path, *extras = argv
    pins: dict[str, str] = {}
    with open(requirements_path, encoding="utf-8") as file:
        for line in file:
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                pins[_canonical(line.split("==", 1)[0])] = line
    with open(pyproject_path, "rb") as file:
        project = tomllib.load(file)["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project.get("optional-dependencies", {})[extra]
    missing = []
    for requirement in wanted:
        match = _NAME.match(requirement)
        assert match, requirement
        pin = pins.get(_canonical(match.group(1)))
        if pin is None:
            missing.append(requirement)
        else:
            print(pin)
    if missing:
        print(f"no exact pin in {requirements_path} for: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
