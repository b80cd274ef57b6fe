"""The application's etcd address: a gRPC front that forwards every call of etcd's v3 API,
unary and streaming, to one node's etcd listener (``kraft.etcd.listener``) without decoding the
messages, as etcd's own gRPC proxy forwards to one member until it fails (``upstreams``: which
node, ``forward``: the calls, ``process``: the process that serves it, ``front``: its parent's
handle, used by ``kraft-spark local --http-port`` and by the Spark driver)."""
