"""Benchmarks that print figures (``kraft-spark bench ...``); none of them is a test."""
