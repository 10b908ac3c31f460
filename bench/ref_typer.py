"""The reference of the `enqueue` workload: a bare typer app, on the same typer as jobctl, whose one
command inserts one job row with stdlib sqlite3 (the same insert as ref_plain.py).

    python bench/ref_typer.py DB TYPE PAYLOAD
"""

import typer

from ref_plain import insert_one

app = typer.Typer(add_completion=False)


@app.command()
def enqueue(db: str, type: str, payload: str = typer.Argument("{}")):
    """Insert one job row; print its id."""
    print(insert_one(db, type, payload))


if __name__ == "__main__":
    app()
