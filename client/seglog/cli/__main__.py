"""``python -m seglog.cli``."""

import sys

from seglog.cli import main

sys.exit(main())
