"""``async-query user add|list|remove``: the users of ``ASYNC_QUERY_AUTH=basic``.

Passwords never come from the command line: from a prompt (asked twice), or with
``--password-stdin`` from the first line of standard input.

Exit codes: 0 done; 2 refused (bad name, role or password, an existing or unknown user, an
unusable users file).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any, TextIO

from async_query.security.users import UsersFile, UsersFileError

EXIT_OK = 0
EXIT_REFUSED = 2


def add_commands(sub: Any) -> None:  # argparse's _SubParsersAction
    user = sub.add_parser(
        "user",
        help="manage the users of ASYNC_QUERY_AUTH=basic",
        description=(
            "Manage the users of ASYNC_QUERY_AUTH=basic, kept in ASYNC_QUERY_USERS_FILE (default "
            "<ASYNC_QUERY_DATA_DIR>/users.json) with argon2id password hashes. A running service notices "
            "changes within a second."
        ),
    )
    user.add_argument("--users-file", type=Path, default=None, help="the users file (default: as the service reads it)")
    commands = user.add_subparsers(dest="user_command", required=True)

    add = commands.add_parser("add", help="add a user (the password is asked twice, or read with --password-stdin)")
    add.add_argument("name")
    add.add_argument(
        "--role",
        dest="roles",
        action="append",
        required=True,
        metavar="ROLE",
        help="a role (repeatable); all_access is admin",
    )
    add.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    add.add_argument("--replace", action="store_true", help="set the password and roles of an existing user")
    add.set_defaults(func=_cmd_add, log_level="warning")

    listed = commands.add_parser("list", help="list the users and their roles")
    listed.set_defaults(func=_cmd_list, log_level="warning")

    remove = commands.add_parser("remove", help="remove a user")
    remove.add_argument("name")
    remove.set_defaults(func=_cmd_remove, log_level="warning")


def _users_file(args: argparse.Namespace) -> UsersFile:
    if args.users_file is not None:
        return UsersFile(args.users_file)
    from async_query.settings import Settings

    return UsersFile(Settings().users_path)


def _cmd_add(args: argparse.Namespace) -> int:
    users = _users_file(args)
    try:
        password = read_new_password(args.name, args.password_stdin, sys.stdin)
        replaced = users.add(args.name, password, args.roles, replace=args.replace)
    except UsersFileError as exc:
        return _refused(exc)
    print(
        f"{'updated' if replaced else 'added'} user {args.name} with roles {', '.join(dict.fromkeys(args.roles))} in {users.path}"
    )
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    users = _users_file(args)
    try:
        found = users.users()
    except UsersFileError as exc:
        return _refused(exc)
    width = max([4, *(len(u.name) for u in found)])
    print(f"{'name'.ljust(width)}  roles")
    for user in found:
        print(f"{user.name.ljust(width)}  {', '.join(user.roles)}")
    print(f"({len(found)} user{'' if len(found) == 1 else 's'} in {users.path})")
    return EXIT_OK


def _cmd_remove(args: argparse.Namespace) -> int:
    users = _users_file(args)
    try:
        removed = users.remove(args.name)
    except UsersFileError as exc:
        return _refused(exc)
    if not removed:
        return _refused(f"no user named {args.name!r} in {users.path}")
    print(f"removed user {args.name} from {users.path}")
    return EXIT_OK


def read_new_password(name: str, from_stdin: bool, stdin: TextIO) -> str:
    """The new password: the first line of ``stdin`` (without its line break), or asked twice on
    the terminal."""
    if from_stdin:
        line = stdin.readline()
        return line.rstrip("\r\n")
    if not stdin.isatty():
        raise UsersFileError("no terminal to ask the password on: pipe it in with --password-stdin")
    try:
        first = getpass.getpass(f"Password for {name}: ")
        again = getpass.getpass("Again: ")
    except (EOFError, KeyboardInterrupt):
        raise UsersFileError("no password given") from None
    if again != first:
        raise UsersFileError("the two passwords differ")
    return first


def _refused(problem: object) -> int:
    print(f"error: {problem}", file=sys.stderr, flush=True)
    return EXIT_REFUSED
