#!/bin/bash
# Runs a swebench_mini task's tests with pytest, verbosely (one line per test, read by parser.py).
# Arguments: the test files, as one comma-separated argument or as several; none: every test.
cd /app || exit 1
export PYTHONDONTWRITEBYTECODE=1

run_tests() {
  python -m pytest -v -p no:cacheprovider --no-header --color=no "$@" 2>&1
}

if [ $# -eq 0 ]; then
  run_tests tests
  exit $?
fi
if [[ "$1" == *,* ]]; then
  IFS=',' read -r -a test_files <<< "$1"
else
  test_files=("$@")
fi
run_tests "${test_files[@]}"
