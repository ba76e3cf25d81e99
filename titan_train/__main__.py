"""`python -m titan_train` runs the titan-train CLI."""

from titan_train.cli import main

main()
