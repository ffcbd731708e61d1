"""`python -m hlopt`: the `hlopt` command."""

import sys

from hlopt.cli.main import main

sys.exit(main())
