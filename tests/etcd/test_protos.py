"""The committed modules of etcd's v3 API are what the vendored .proto files generate, and they
keep etcd's wire names (the gRPC paths etcd's clients call)."""

from __future__ import annotations

import importlib.util

import pytest

from kraft_spark.etcd.pb import rpc_pb2


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None,
                    reason="grpcio-tools (a dev dependency) is not installed")
def test_generated_modules_are_up_to_date() -> None:
    from kraft_spark.etcd.pb.generate import main

    assert main(["--check"]) == 0, "run `make etcd-protos` and commit the result"


def test_services_keep_etcds_names_and_fields() -> None:
    services = rpc_pb2.DESCRIPTOR.services_by_name
    assert {"KV", "Watch", "Lease", "Cluster", "Maintenance", "Auth"} <= set(services)
    assert services["KV"].methods_by_name["Range"].full_name == "etcdserverpb.KV.Range"
    # Field numbers are the wire format: a few etcd clients rely on, checked against etcd's.
    fields = rpc_pb2.RangeRequest.DESCRIPTOR.fields_by_name
    assert (fields["range_end"].number, fields["count_only"].number,
            fields["max_create_revision"].number) == (2, 9, 13)
    assert rpc_pb2.WatchCreateRequest.DESCRIPTOR.fields_by_name["prev_kv"].number == 6


def test_strip_keeps_everything_but_go_options() -> None:
    from kraft_spark.etcd.pb.generate import strip

    source = ('syntax = "proto3";\nimport "google/api/annotations.proto";\n'
              'import "etcd/api/mvccpb/kv.proto";\n'
              'message A {\n  option (versionpb.etcd_version_msg) = "3.0";\n'
              '  int64 x = 1 [(versionpb.etcd_version_field)="3.1"];\n}\n'
              'service S {\n  rpc M(A) returns (A) {\n    option (google.api.http) = {\n'
              '      post: "/v3/m"\n      body: "*"\n    };\n  }\n}\n')
    out = strip(source)
    assert "google/api" not in out and "versionpb" not in out and "option" not in out
    assert 'import "kraft_spark/etcd/pb/kv.proto";' in out
    assert "int64 x = 1;" in out and "rpc M(A) returns (A)" in out
