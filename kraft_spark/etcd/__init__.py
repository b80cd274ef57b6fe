"""etcd's v3 API over the store: the translation of etcd's requests into the store's reads and
writes (pure, no gRPC: ``revision``, ``kv``, ``plan``, ``errors``), and the Python modules
generated from etcd's ``.proto`` files (``pb``). The gRPC servicers are in ``api.etcd``."""
