"""``kraft-spark metadata-quorum ... add-controller | remove-controller | reassign``: KIP-853
voter changes, as Kafka 4.x's ``kafka-metadata-quorum.sh`` makes them.

* ``add-controller`` adds the node that ``--command-config`` describes (``node.id``,
  ``controller.listener.names``, ``listeners`` / ``advertised.listeners``, and ``log.dirs`` or
  ``metadata.log.dir`` whose ``meta.properties`` holds its ``directory.id``). The node must be
  running as an observer and caught up: the leader refuses it otherwise (REQUEST_TIMED_OUT).
* ``remove-controller --controller-id N --controller-directory-id ID``.
* ``reassign --voters 1,2,3,4@host:port,...`` (quorum reassignment, docs/operations/voters.md): one
  change at a time towards the target, additions first, reporting each step; a node to add must
  be running as an observer (its directory id comes from the leader's DescribeQuorum) and is
  given with its listener.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable
from typing import Any

from kraft_spark.addresses import url_host
from kraft_spark.errors import CommandError
from kraft_spark.log.errors import LogError
from kraft_spark.log.meta import read_meta_properties
from kraft_spark.properties import load_properties, parse_endpoint
from kraft_spark.raft.config import ConfigError
from kraft_spark.raft.voter_set import NIL_DIRECTORY, Endpoint, directory_text, parse_directory

Runner = Callable[[argparse.Namespace, Any], Any]


def register_actions(actions: Any, run: Runner) -> None:
    add = actions.add_parser("add-controller", help="add the controller --command-config "
                                                    "describes to the voters (KIP-853)")
    add.add_argument("--dry-run", action="store_true", help="print what would be done")
    add.set_defaults(func=lambda args: _add(args, run))
    remove = actions.add_parser("remove-controller", help="remove a voter (KIP-853)")
    remove.add_argument("--controller-id", "-i", type=int, required=True,
                        help="its node.id")
    remove.add_argument("--controller-directory-id", "-d", required=True,
                        help="its directory.id (see describe --status)")
    remove.add_argument("--dry-run", action="store_true", help="print what would be done")
    remove.set_defaults(func=lambda args: _remove(args, run))
    reassign = actions.add_parser("reassign", help="change the voters to a target set, one "
                                                   "voter at a time")
    reassign.add_argument("--voters", required=True, metavar="ID,ID,...",
                          help="the target voter ids; nodes to add must run as observers")
    reassign.set_defaults(func=lambda args: _reassign(args, run))


def controller_of(path: str) -> tuple[int, uuid.UUID, tuple[Endpoint, ...]]:
    """(node id, directory id, endpoints) of the controller a properties file describes;
    CommandError naming the missing key otherwise (Kafka's checks and wording)."""
    try:
        props = load_properties(path)
    except OSError as exc:
        raise CommandError(f"cannot read --command-config {path}: {exc.strerror}") from None
    if "node.id" not in props:
        raise CommandError(f"node.id not found in configuration file {path}. Is this a valid "
                           "controller configuration file?")
    try:
        node_id = int(props["node.id"])
    except ValueError:
        raise CommandError(f"node.id in {path} is not a number") from None
    if node_id < 0:
        raise CommandError(f"node.id was negative in configuration file {path}")
    log_dir = props.get("metadata.log.dir") or props.get("log.dirs", "").split(",")[0].strip()
    if not log_dir:
        raise CommandError(f"Neither metadata.log.dir nor log.dirs were found in {path}. Is "
                           "this a valid controller configuration file?")
    try:
        meta = read_meta_properties(log_dir)
    except (LogError, OSError) as exc:
        raise CommandError(f"Unable to read meta.properties from {log_dir}: {exc}") from None
    if meta is None:
        raise CommandError(f"Unable to read meta.properties from {log_dir}: format it with "
                           "kraft-spark format first")
    try:
        directory = parse_directory(meta.directory_id)
    except ValueError:
        raise CommandError(f"No directory id found in {log_dir}") from None
    names = [n.strip() for n in props.get("controller.listener.names", "CONTROLLER").split(",")]
    listeners: dict[str, str] = {}
    for key in ("listeners", "advertised.listeners"):
        for entry in filter(None, (p.strip() for p in props.get(key, "").split(","))):
            name = entry.split("://", 1)[0] if "://" in entry else "PLAINTEXT"
            listeners[name.upper()] = entry
    endpoints = []
    for name in names:
        item = listeners.get(name.upper())
        if item is None and len(listeners) == 1 and names == ["CONTROLLER"]:
            item = next(iter(listeners.values()))  # our nodes' single unnamed listener
        if item is None:
            raise CommandError(f"Cannot find information about controller listener name: "
                               f"{name} in {path}")
        try:
            host, port = parse_endpoint(item, "listeners")
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        endpoints.append(Endpoint(name.upper(), host or "localhost", port))
    return node_id, directory, tuple(endpoints)


def _endpoint_text(endpoint: Endpoint) -> str:
    return f"{endpoint.name}://{url_host(endpoint.host)}:{endpoint.port}"


def _add(args: argparse.Namespace, run: Runner) -> int:
    if not args.command_config:
        raise CommandError("add-controller needs --command-config FILE (the new "
                           "controller's properties: node.id, listeners, log.dirs)")
    node_id, directory, endpoints = controller_of(args.command_config)
    if not args.dry_run:
        async def go(client: Any) -> None:
            await client.add_voter(node_id, directory, endpoints, timeout_s=args.timeout)

        run(args, go)
    print(f"{'DRY RUN of adding' if args.dry_run else 'Added'} controller {node_id} with "
          f"directory id {directory_text(directory)} and endpoints: "
          + ", ".join(_endpoint_text(e) for e in endpoints))
    return 0


def _remove(args: argparse.Namespace, run: Runner) -> int:
    if args.controller_id < 0:
        raise CommandError(f"Invalid negative --controller-id: {args.controller_id}")
    try:
        directory = parse_directory(args.controller_directory_id)
    except ValueError as exc:
        raise CommandError(f"Failed to parse --controller-directory-id: {exc}") from None
    if not args.dry_run:
        async def go(client: Any) -> None:
            await client.remove_voter(args.controller_id, directory, timeout_s=args.timeout)

        run(args, go)
    print(f"{'DRY RUN of removing ' if args.dry_run else 'Removed '} KRaft controller "
          f"{args.controller_id} with directory id {directory_text(directory)}")
    return 0


def _target(text: str) -> dict[int, Endpoint | None]:
    """``--voters 1,2,3,4@host:port``: target ids, each new one with its listener."""
    target: dict[int, Endpoint | None] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        ident, _, where = item.partition("@")
        try:
            node = int(ident)
        except ValueError:
            raise CommandError(f"--voters: expected id or id@host:port, got {item!r}") from None
        if node < 0:
            raise CommandError(f"--voters: negative id in {item!r}")
        try:
            target[node] = Endpoint("CONTROLLER", *parse_endpoint(where, "--voters")) if where \
                else None
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
    if not target:
        raise CommandError("--voters: name at least one voter")
    return target


def _reassign(args: argparse.Namespace, run: Runner) -> int:
    target = _target(args.voters)

    async def go(client: Any) -> int:
        steps = 0
        while True:
            info = await client.describe_quorum()
            voters = {v.replica_id: v for v in info.voters}
            observers = {o.replica_id: o for o in info.observers}
            to_add = [i for i in sorted(target) if i not in voters]
            to_remove = [i for i in sorted(voters) if i not in target]
            if not to_add and not to_remove:
                return steps
            if to_add:  # grow first: the quorum never has fewer voters than it started with
                node = to_add[0]
                seen = observers.get(node)
                endpoint = target[node]
                if seen is None or seen.directory_id is None:
                    raise CommandError(f"node {node} is not fetching from the leader as an "
                                       "observer: start it first, then retry")
                if endpoint is None:
                    raise CommandError(f"--voters: node {node} is new: give its listener as "
                                       f"{node}@host:port")
                await client.add_voter(node, parse_directory(seen.directory_id), (endpoint,),
                                       timeout_s=args.timeout, target=tuple(sorted(target)))
                now = sorted({*voters, node})
                print(f"added voter {node} ({seen.directory_id}); voters now {now}", flush=True)
            else:
                node = to_remove[0]
                directory = voters[node].directory_id or directory_text(NIL_DIRECTORY)
                await client.remove_voter(node, parse_directory(directory),
                                          timeout_s=args.timeout, target=tuple(sorted(target)))
                now = sorted(set(voters) - {node})
                print(f"removed voter {node}; voters now {now}", flush=True)
            steps += 1

    steps = run(args, go)
    print(f"reassignment complete: voters {sorted(target)} ({steps} change(s))",
          file=sys.stderr)
    return 0
