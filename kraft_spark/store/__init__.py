"""The store API over the replicated log: conditional writes, reads by key, watches."""
