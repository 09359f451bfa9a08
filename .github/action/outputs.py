"""The action's outputs from the check's JSON (loadtune/schema/check.schema.json): ``key=value`` lines
appended to ``$GITHUB_OUTPUT``, where later steps read them as ``steps.<id>.outputs.<key>``.

``ratio`` is the head's samples/s over the base's, ``low``/``high`` its interval (``change`` plus one);
a figure the check did not reach (nothing measured, a spec new in the change, an unbounded high) is an
empty string, and every output is empty when the check wrote no result (a usage error)."""

import json
import os
import sys
from pathlib import Path


def ratio(change) -> str:
    return "" if change is None else f"{1 + change:.4f}"


def outputs(json_path: Path, junit_path: str) -> dict:
    """The outputs' values, read from the check's result file."""
    if not json_path.is_file():
        return {"verdict": "", "ratio": "", "low": "", "high": "", "json": "", "junit-xml": ""}
    result = json.loads(json_path.read_text())
    return {
        "verdict": result["status"],
        "ratio": ratio(result.get("change")),
        "low": ratio(result.get("change_low")),
        "high": ratio(result.get("change_high")),
        "json": str(json_path),
        "junit-xml": junit_path if junit_path and Path(junit_path).is_file() else "",
    }


def main(argv: list[str]) -> None:
    values = outputs(Path(argv[1]), argv[2] if len(argv) > 2 else "")
    lines = "".join(f"{key}={value}\n" for key, value in values.items())
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(lines)
    else:  # run by hand, outside a runner
        sys.stdout.write(lines)


if __name__ == "__main__":
    main(sys.argv)
