"""The append router: the address users are given, forwarding appends to the leader's own
HTTP API (``router``), run as a process of its own (``process``)."""
