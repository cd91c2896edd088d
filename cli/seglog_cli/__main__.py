"""``python -m seglog_cli``."""

import sys

from seglog_cli import main

sys.exit(main())
