"""The networked node: Kafka-framed TCP transport, the asyncio shell around RaftCore."""
