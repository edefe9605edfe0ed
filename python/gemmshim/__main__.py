"""python -m gemmshim: the same as the gemmshim command."""
import sys

from .cli import main

sys.exit(main())
