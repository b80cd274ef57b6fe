"""etcd's v3 API: modules generated from etcd's .proto files (``generate``)."""
