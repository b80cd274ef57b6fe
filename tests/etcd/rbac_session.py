"""The RBAC session ``tests/etcd/test_etcdctl.py`` runs through Debian's etcdctl 3.4 against
kraft-spark and against etcd 3.4: as each system's administrator (kraft-spark: the credentials
file's admin; etcd: ``root``, added and enabled first), then as the user it adds, then as the
administrator again to take it all away. Every step's output, errors included, is compared;
the built-in users and roles (the credentials file's, root, writer, reader) are left out of
the listings, as etcd's root is."""

from __future__ import annotations

from typing import Protocol

BUILTIN = {"root", "admin", "writer", "reader"}  # users and roles each system has on its own
ALICE = "alice:alice-pw"
TXN_OUTSIDE = 'value("rb/other") = "1"\n\nput rb/app/t 1\n\n\n'

# (who, etcdctl arguments, stdin): "root" is the system's administrator, "alice" the user the
# session adds (role app: readwrite on the prefix rb/app/, read on rb/shared, write on the
# range [rb/logs/, rb/logs0), later read from ~rb on).
SESSION: list[tuple[str, tuple[str, ...], str | None]] = [
    ("root", ("user", "add", ALICE), None),
    ("root", ("role", "add", "app"), None),
    ("root", ("role", "grant-permission", "--prefix=true", "app", "readwrite", "rb/app/"), None),
    ("root", ("role", "grant-permission", "app", "read", "rb/shared"), None),
    ("root", ("role", "grant-permission", "app", "write", "rb/logs/", "rb/logs0"), None),
    ("root", ("user", "grant-role", "alice", "app"), None),
    ("root", ("user", "list"), None),
    ("root", ("role", "list"), None),
    ("root", ("role", "get", "app"), None),
    ("root", ("user", "get", "alice"), None),
    ("root", ("user", "add", "alice:other"), None),
    ("root", ("role", "add", "app"), None),
    ("root", ("role", "get", "nope"), None),
    ("root", ("user", "grant-role", "alice", "nope"), None),
    ("root", ("user", "revoke-role", "alice", "nope"), None),
    ("root", ("role", "revoke-permission", "app", "nothere"), None),
    ("root", ("put", "rb/other", "1"), None),
    ("alice", ("put", "rb/app/x", "1"), None),
    ("alice", ("put", "rb/other", "2"), None),
    ("alice", ("get", "rb/app/", "--prefix"), None),
    ("alice", ("get", "rb/other"), None),
    ("alice", ("get", "rb/shared"), None),
    ("alice", ("put", "rb/shared", "v"), None),
    ("alice", ("put", "rb/logs/a", "v"), None),
    ("alice", ("get", "rb/logs/a"), None),
    ("alice", ("get", "", "--prefix"), None),
    ("alice", ("put", "rb/app/x", "2", "--prev-kv"), None),  # reads rb/app/x too
    ("alice", ("put", "rb/logs/b", "v", "--prev-kv"), None),  # may write it, not read it
    ("alice", ("del", "rb/app/", "--prefix"), None),
    ("alice", ("del", "rb/other"), None),
    ("alice", ("txn",), TXN_OUTSIDE),  # a compare outside its keys
    ("alice", ("user", "list"), None),
    ("alice", ("role", "get", "app"), None),  # its own role
    ("alice", ("user", "get", "alice"), None),  # itself
    ("alice", ("role", "add", "mine"), None),
    # from-key: "~" sorts after every key the module's other tests write
    ("root", ("role", "grant-permission", "--from-key=true", "app", "read", "~rb"), None),
    ("root", ("role", "get", "app"), None),
    ("alice", ("get", "~rb/z"), None),
    ("alice", ("get", "~rb", "--from-key"), None),
    ("alice", ("get", "~ra", "--from-key"), None),
    ("root", ("user", "passwd", "alice", "--interactive=false"), "alice-pw\n"),
    ("alice", ("get", "rb/app/x"), None),  # the same password again
    ("root", ("role", "revoke-permission", "--prefix=true", "app", "rb/app/"), None),
    ("alice", ("put", "rb/app/y", "1"), None),
    ("root", ("user", "revoke-role", "alice", "app"), None),
    ("root", ("role", "delete", "app"), None),
    ("root", ("user", "delete", "alice"), None),
    ("root", ("user", "list"), None),
]


class Ctl(Protocol):
    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str: ...


def normalized(text: str) -> str:
    """The listings without each system's own users and roles, the errors without clientv3's
    retry log lines (timestamps, connection ids)."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if line.strip() not in BUILTIN and not line.startswith('{"level":'))


def run_session(root: Ctl, alice: Ctl) -> list[str]:
    return [normalized((root if who == "root" else alice)(*args, stdin=stdin, check=False))
            for who, args, stdin in SESSION]
