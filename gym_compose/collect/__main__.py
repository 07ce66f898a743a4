import sys

from gym_compose.collect.cli import main

sys.exit(main())
