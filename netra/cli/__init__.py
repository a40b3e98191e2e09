"""The command line: `netra` (the console script and `python -m netra` enter through netra.__main__:main).

commands: the parser and main; host_commands and source_commands: each subcommand, a thin shell over
the module that does the work; support: what the commands share; doctor: the install and the host
reported; proof: the install proven file by file; inventory: what an install ships (catalog, explain);
schemas: the JSON schemas of the --json reports, completed from the registry.
"""

from netra.cli.commands import MODULES, main, parser

__all__ = ["MODULES", "main", "parser"]
