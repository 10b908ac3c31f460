"""Storage engines. The queue core talks only to the Engine contract in base.py."""
