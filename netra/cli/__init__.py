"""The command line: `netra` (the console script and `python -m netra` enter through netra.__main__:main).

commands: the parser and each subcommand, a thin shell over the module that does the work; doctor:
an install proven file by file, and the host; inventory: what an install ships (catalog, explain);
schemas: the JSON schemas of the --json reports, completed from the registry.
"""

from netra.cli.commands import MODULES, main, parser

__all__ = ["MODULES", "main", "parser"]
