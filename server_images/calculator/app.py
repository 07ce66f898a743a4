"""Calculator, seed/verify protocol: a `calculate` tool; the reward checks the final answer.

Each row carries `expected_answer`; the reward is 1.0 when the last assistant message states it.
"""

import ast
import math
import operator
import re

from fastapi import FastAPI
from pydantic import BaseModel

from nemo_gym.base_resources_server import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer

MAX_RESULT_BITS = 4096


def _power(base, exponent):
    """`**`, refusing integer results too large to compute: `9**9**9` would hold the server's one thread."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1 \
            and exponent * math.log2(abs(base)) > MAX_RESULT_BITS:
        raise ValueError(f"result too large (more than {MAX_RESULT_BITS} bits)")
    return operator.pow(base, exponent)


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: _power, ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate(expression: str) -> float:
    """Arithmetic only (+ - * / ** and parentheses); anything else raises ValueError."""

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.operand))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:80]}")

    return walk(ast.parse(expression, mode="eval"))


def final_number(text: str) -> float | None:
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    return float(numbers[-1]) if numbers else None


class CalculateRequest(BaseModel):
    expression: str


class CalculatorVerifyRequest(BaseVerifyRequest):
    expected_answer: float


class CalculatorVerifyResponse(BaseVerifyResponse):
    expected_answer: float
    answered: float | None = None


class CalculatorServer(SimpleResourcesServer):
    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/calculate")(self.calculate)
        return app

    async def calculate(self, body: CalculateRequest) -> dict:
        try:
            return {"result": evaluate(body.expression)}
        except (ValueError, SyntaxError, ZeroDivisionError, OverflowError) as error:
            return {"error": str(error)}

    async def verify(self, body: CalculatorVerifyRequest) -> CalculatorVerifyResponse:
        last_text = ""
        for item in body.response.output:
            if item.type == "message" and item.role == "assistant" and not isinstance(item.content, str):
                last_text = "".join(getattr(part, "text", "") for part in item.content)
        answered = final_number(last_text)
        correct = answered is not None and abs(answered - body.expected_answer) < 1e-6
        return CalculatorVerifyResponse(**body.model_dump(), answered=answered, reward=float(correct))


if __name__ == "__main__":
    CalculatorServer.run_webserver()
