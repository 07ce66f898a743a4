"""SWE-bench Pro-format tasks inside containers: the rows, the evaluation that scores a diff in a
fresh sandbox, and the verifier resources server (built-in implementation `swebench_pro`).
Reference: docs/swe.md."""
