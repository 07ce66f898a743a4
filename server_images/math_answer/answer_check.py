"""The answer check of math_answer: find the final answer in a model's text and decide whether it
equals the expected one with math-verify (symbolic equivalence, not string equality).

Pure functions; `check_answer` is what the server runs in its worker processes (math-verify's
own time limits use SIGALRM, which works only in a process's main thread).
"""

from __future__ import annotations

import re
from typing import Any, Optional

BOX_COMMANDS = ("\\boxed", "\\fbox")
# a number as people write it: -1,234.5 or 3/4 or .5 (the last one in the text is the answer)
NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def last_boxed(text: str) -> Optional[str]:
    """The contents of the last complete `\\boxed{...}` (or `\\fbox{...}`), braces balanced."""
    start = max(text.rfind(command + "{") for command in BOX_COMMANDS)
    if start < 0:
        return None
    start = text.index("{", start) + 1
    depth = 1
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[start:index].strip()
    return None


def last_number(text: str) -> Optional[str]:
    numbers = NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def extract_answer(text: str) -> tuple[Optional[str], Optional[str]]:
    """(answer, how): the last boxed answer, else the last number in the text; (None, None) if neither."""
    boxed = last_boxed(text)
    if boxed:
        return boxed, "boxed"
    number = last_number(text)
    if number is not None:
        return number, "last_number"
    return None, None


def strip_delimiters(answer: str) -> str:
    """`$x$`, `\\(x\\)` and `\\[x\\]` -> `x` (expected answers often come wrapped)."""
    answer = answer.strip()
    for left, right in (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if answer.startswith(left) and answer.endswith(right) and len(answer) > len(left) + len(right) - 1:
            answer = answer[len(left):len(answer) - len(right)].strip()
    return answer


def normalized(answer: str) -> str:
    """A plain-text form for answers math-verify cannot parse (names, words): no spaces, no \\text."""
    answer = re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", strip_delimiters(answer))
    return re.sub(r"[\s$]", "", answer).rstrip(".").lower()


def check_answer(expected: Any, text: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Whether `text` ends with an answer equivalent to `expected`.

    Returns {"correct", "extracted_answer", "extraction", "method"}: extraction is "boxed",
    "last_number" or None (no answer found); method is "math_verify" or "text" (math-verify
    parsed nothing of the expected answer, so the normalized texts are compared).
    """
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    answer, how = extract_answer(text)
    result: dict[str, Any] = {"correct": False, "extracted_answer": answer, "extraction": how, "method": None}
    if answer is None:
        return result
    targets = (LatexExtractionConfig(), ExprExtractionConfig())
    seconds = max(1, int(timeout_s))
    gold = parse("\\boxed{" + strip_delimiters(str(expected)) + "}", extraction_config=targets,
                 parsing_timeout=seconds)
    if not gold:
        result.update(method="text", correct=normalized(answer) == normalized(str(expected)))
        return result
    predicted = parse("\\boxed{" + strip_delimiters(answer) + "}", extraction_config=targets, parsing_timeout=seconds)
    correct = bool(predicted) and verify(gold, predicted, timeout_seconds=seconds)
    if not correct and normalized(answer) == normalized(str(expected)):
        correct = True  # the very same text (e.g. a set math-verify reads differently each time)
    result.update(method="math_verify", correct=bool(correct))
    return result


def serve(requests: Any = None, answers: Any = None) -> None:
    """The worker loop: first a line {"ready": true} once the libraries are imported, then one JSON
    request per line ({"expected", "text", "timeout_s"}) in, one JSON result per line out.
    Anything the libraries print goes to stderr, never into the answers."""
    import json
    import sys

    requests = requests or sys.stdin
    answers = answers or sys.stdout
    sys.stdout = sys.stderr
    import math_verify  # noqa: F401  (SymPy's import takes seconds: pay it before saying ready)

    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            result = check_answer(request["expected"], request["text"], float(request.get("timeout_s", 5)))
        except BaseException as error:  # math-verify's TimeoutException is a BaseException
            result = {"correct": False, "extracted_answer": None, "extraction": None, "method": None,
                      "reason": f"the answer check failed: {type(error).__name__}: {error}"}
        answers.write(json.dumps(result) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
