import sys

from netra.cli import main

sys.exit(main())
