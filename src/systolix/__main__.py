"""``python -m systolix`` runs the CLI."""

from systolix.cli import main

main()
