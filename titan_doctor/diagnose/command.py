"""`titan-doctor diagnose` (placeholder until its issue lands)."""
import click


@click.command()
def diagnose():
    """Not implemented yet."""
    raise click.UsageError("titan-doctor diagnose is not implemented yet")
