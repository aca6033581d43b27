"""``python -m segcli``."""

from segcli.cli import main

main()
