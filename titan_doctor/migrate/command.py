"""`titan-doctor migrate` (placeholder until its issue lands)."""
import click


@click.command()
def migrate():
    """Not implemented yet."""
    raise click.UsageError("titan-doctor migrate is not implemented yet")
