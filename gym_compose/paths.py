"""Where this project's own files are (server_images/, configs/, compose_templates/, docker/, ...).

gym-compose runs from its checkout, installed editable (`pip install -e .`, as scripts/setup
does): the server folders, templates and Dockerfiles sit next to the package, not inside it.
"""

from pathlib import Path

from gym_compose.errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PROJECT_FOLDERS = ("server_images", "configs", "compose_templates", "docker")


def require_project_files() -> None:
    """Fail at once, saying how to install, when the package was installed without its checkout."""
    missing = [name for name in PROJECT_FOLDERS if not (PROJECT_ROOT / name).is_dir()]
    if missing:
        raise UserError(
            f"this gym-compose installation ({PROJECT_ROOT / 'gym_compose'}) has no {', '.join(missing)} "
            "beside it: gym-compose runs from its source checkout",
            hint="install it editable from the checkout: `pip install -e /path/to/gym-compose` (scripts/setup does)",
        )
