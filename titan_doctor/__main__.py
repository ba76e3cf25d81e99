"""`python -m titan_doctor` runs the titan-doctor CLI."""

from titan_doctor.cli import main

main()
