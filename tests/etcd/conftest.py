"""Fixtures of the etcd API tests: one real ``kraft-spark local`` per module, its admin
credential, and gRPC stubs built from the generated descriptors (no ``_grpc`` modules)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

from kraft_spark.http_auth import CREDENTIALS_FILE, Credentials, Scope
from tests.integration.harness import running
from tests.lincheck.nemesis import KvQuorum


class Stub:
    """``stub.Method(request, ...)`` for every method of ``service`` on ``channel``."""

    def __init__(self, channel: grpc.Channel, service: ServiceDescriptor) -> None:
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            request = message_factory.GetMessageClass(method.input_type)
            response = message_factory.GetMessageClass(method.output_type)
            kind = {(False, False): channel.unary_unary, (False, True): channel.unary_stream,
                    (True, False): channel.stream_unary,
                    (True, True): channel.stream_stream}[
                (method.client_streaming, method.server_streaming)]
            setattr(self, method.name, kind(path, request_serializer=request.SerializeToString,
                                            response_deserializer=response.FromString))

    def __getattr__(self, name: str) -> Any:  # for the type checker: set in __init__
        raise AttributeError(name)


@pytest.fixture(scope="module")
def etcd_quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvQuorum]:
    """A real ``kraft-spark local`` (three nodes, HTTP and etcd's API), shared by a module."""
    with running(KvQuorum(tmp_path_factory.mktemp("etcd"))) as q:
        yield q


@pytest.fixture(scope="module")
def etcd_admin(etcd_quorum: KvQuorum) -> tuple[str, str]:
    """(user, password) of the quorum's admin credential, as etcd's clients send them."""
    credentials = Credentials.load(str(etcd_quorum.data_dir / CREDENTIALS_FILE))
    admin = next(c for c in credentials.entries if c.scope == Scope.ADMIN)
    return admin.name or admin.scope.label, admin.token
