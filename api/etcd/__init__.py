"""etcd's v3 gRPC API served by a node (``kraft.etcd.listener``): the servicers, over the same
``NodeStore`` and ``NodeBackend`` as the node's HTTP API (``api.node_http``). The translation of
requests into reads and writes is ``kraft_spark.etcd``; docs/etcd-api.md says what works."""
