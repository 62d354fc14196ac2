"""`python -m loglake.cli`: the `loglake` command."""

import sys

from loglake.cli import main

sys.exit(main())
