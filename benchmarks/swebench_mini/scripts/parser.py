"""Reads pytest -v output into {"tests": [{"name", "status"}]}, the form SWE-bench Pro's
evaluator grades: python parser.py STDOUT_FILE STDERR_FILE OUTPUT_JSON.

A line `tests/test_x.py::test_y[param] PASSED   [ 50%]` gives name `tests/test_x.py::test_y[param]`
and status PASSED; XFAIL counts as PASSED, XPASS as FAILED. A test reported twice keeps its last
status. Tests that never ran (a file that failed to import) are simply absent.
"""

import json
import re
import sys

LINE = re.compile(r"^(?P<name>\S[^\s]*::\S.*?)\s+(?P<status>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s|$)")
STATUS = {"PASSED": "PASSED", "XFAIL": "PASSED", "FAILED": "FAILED", "XPASS": "FAILED", "ERROR": "ERROR",
          "SKIPPED": "SKIPPED"}


def parse(text):
    results = {}
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if match:
            results[match.group("name")] = STATUS[match.group("status")]
    return results


def main(stdout_path, stderr_path, output_path):
    with open(stdout_path, errors="replace") as stdout, open(stderr_path, errors="replace") as stderr:
        results = parse(stdout.read() + "\n" + stderr.read())
    with open(output_path, "w") as output:
        json.dump({"tests": [{"name": name, "status": status} for name, status in results.items()]}, output, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python parser.py STDOUT_FILE STDERR_FILE OUTPUT_JSON")
    main(*sys.argv[1:])
