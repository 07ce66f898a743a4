"""Words the sandbox launcher and the broker's channel agree on."""

NO_PYTHON_MARKER = "gym-sandbox: no python3"
