"""The warehouse on shared storage: where it is (``location``), the Raft snapshots copied beside
the Delta tables (``snapshot_copies``), and rebuilding a quorum from it (``restore_plan``,
``restore``)."""
