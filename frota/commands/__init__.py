"""One module per ``frota`` subcommand; each exposes ``register(subparsers)``."""
