"""``frota collector token add|list|remove``: the HTTP API's tokens (collector/tokens.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from frota.errors import UserError


def add_subcommands(sub: Any) -> None:
    """Add ``token add|list|remove`` under ``frota collector``."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "token",
        help="the HTTP API's tokens: add, list, remove",
        description="Manage the HTTP API's tokens, kept hashed in the file named by the "
        "configuration's http.tokens_file. Roles: operador (its operator's vehicles only), "
        "fiscal (reads every vehicle), admin (reads and manages). See docs/collector.md.",
    )
    tsub = parser.add_subparsers(dest="token_command", metavar="ACTION")
    tsub.required = True
    add = tsub.add_parser("add", help="add a token and print it once",
                          description="Add an API token; it is printed once on stdout and only "
                          "its hash is kept.")
    add.add_argument("--config", required=True, metavar="FILE", help="the collector's configuration")
    add.add_argument("--role", required=True, choices=["operador", "fiscal", "admin"])
    add.add_argument("--operator", metavar="NAME",
                     help="for operador: the operator whose vehicles it sees (registry "
                     "vehicles[].operator)")
    add.set_defaults(func=_add)
    lst = tsub.add_parser("list", help="list the tokens (never the tokens themselves)",
                          description="List the API tokens: id, role, operator, created.")
    lst.add_argument("--config", required=True, metavar="FILE", help="the collector's configuration")
    lst.set_defaults(func=_list)
    rem = tsub.add_parser("remove", help="remove a token by id",
                          description="Remove an API token by its id (the part after frota_).")
    rem.add_argument("--config", required=True, metavar="FILE", help="the collector's configuration")
    rem.add_argument("id", metavar="ID")
    rem.set_defaults(func=_remove)


def _file(config_path: str) -> Path:
    from collector.config import ConfigError, load_config

    try:
        config = load_config(Path(config_path))
    except ConfigError as err:
        raise UserError(str(err)) from err
    if config.http.tokens_file is None:
        raise UserError(f"{config_path}: http.tokens_file is not set (where tokens are kept)")
    return config.http.tokens_file


def _add(args: argparse.Namespace) -> int:
    from collector.tokens import TokenError, add

    try:
        token, text = add(_file(args.config), args.role, args.operator)
    except TokenError as err:
        raise UserError(str(err)) from err
    print(text)
    import sys

    print(f"token {token.id} ({token.role}) added; it is shown only this once", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace) -> int:
    from collector.tokens import TokenError, Tokens

    try:
        for token in Tokens(_file(args.config)).all():
            print(f"{token.id}  {token.role:8}  {token.operator or '-'}  {token.created}")
    except TokenError as err:
        raise UserError(str(err)) from err
    return 0


def _remove(args: argparse.Namespace) -> int:
    from collector.tokens import TokenError, remove

    try:
        if not remove(_file(args.config), args.id):
            raise UserError(f"no token with id {args.id!r}")
    except TokenError as err:
        raise UserError(str(err)) from err
    print(f"token {args.id} removed")
    return 0
