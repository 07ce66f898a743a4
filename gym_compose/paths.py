"""Where this project's own files are (server_images/, compose_templates/, docker/, ...).

gym-compose is installed editable (`pip install -e .`), so they sit next to the package.
"""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
