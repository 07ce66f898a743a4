"""End-to-end tests against the real Docker engine.

Every project they start is named `<PROJECT_PREFIX>-...`: set GYM_COMPOSE_E2E_PREFIX to run the
suite beside another run of it on the same engine (the default is `gce2e`)."""

import os

PROJECT_PREFIX = os.environ.get("GYM_COMPOSE_E2E_PREFIX", "gce2e")
