"""``python -m frota`` runs the command line."""

import sys

from frota.cli import main

sys.exit(main())
