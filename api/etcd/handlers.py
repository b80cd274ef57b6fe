"""gRPC handlers for etcd's services, built from their descriptors (no generated ``_grpc``
stubs: this is what those hold). Every call is authenticated first (``api.etcd.auth``); an
``EtcdError`` becomes etcd's status code and message; a method a servicer does not implement
answers UNIMPLEMENTED naming itself."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from kraft_spark.etcd import errors

log = logging.getLogger(__name__)

# (method's full name "etcdserverpb.KV/Range", the call's metadata) -> raises EtcdError or
# returns the caller's identity (None: no credentials needed).
Authorizer = Callable[[str, Any], object]


async def _abort(context: grpc.aio.ServicerContext, exc: errors.EtcdError) -> None:
    await context.abort(grpc.StatusCode[exc.code], exc.message)


def _wrap(method: MethodDescriptor, impl: Callable[..., Any] | None,
          authorize: Authorizer) -> Callable[..., Any]:
    name = f"{method.containing_service.full_name}/{method.name}"

    async def check(context: grpc.aio.ServicerContext) -> object:
        try:
            return authorize(name, context.invocation_metadata())
        except errors.EtcdError as exc:
            await _abort(context, exc)
            raise  # abort raises; for the type checker

    if method.server_streaming:
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            identity = await check(context)
            if impl is None:
                await _abort(context, errors.unimplemented(name))
                return
            try:
                async for item in impl(request, context, identity):
                    yield item
            except errors.EtcdError as exc:
                await _abort(context, exc)

        return stream

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        identity = await check(context)
        if impl is None:
            await _abort(context, errors.unimplemented(name))
        try:
            return await impl(request, context, identity)  # type: ignore[misc]
        except errors.EtcdError as exc:
            await _abort(context, exc)
        except Exception:
            log.exception("etcd API: %s failed", name)
            raise

    return unary


def service_handler(service: ServiceDescriptor, servicer: object,
                    authorize: Authorizer) -> grpc.GenericRpcHandler:
    """The handler of every method of ``service``: ``servicer.<Method>(request, context,
    identity)``, a coroutine (unary answer) or an async generator (streamed answer)."""
    handlers = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        call = _wrap(method, getattr(servicer, method.name, None), authorize)
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(call, request_deserializer=request.FromString,
                                     response_serializer=response.SerializeToString)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)
