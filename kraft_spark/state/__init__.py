"""The state the committed log is applied to, and its snapshots (KIP-630)."""
