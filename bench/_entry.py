"""How a bench script ends when its reader goes away or the user stops it: one line, no traceback.

Bench scripts run with whichever python is under test (an install's venv, or a plain python3 driving
two of them), so this uses the standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def run(main: Callable[[], None]) -> None:
    """main(), then exit: 141 when stdout's reader closed it (as `| head` does), 130 on Ctrl-C."""
    try:
        main()
        sys.stdout.flush()  # a closed pipe shows here, inside the handler
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the final flush must not fail again
        sys.exit(141)
    except KeyboardInterrupt:
        print(
            f"{os.path.basename(sys.argv[0])}: interrupted; nothing was measured to the end", file=sys.stderr
        )
        sys.exit(130)
