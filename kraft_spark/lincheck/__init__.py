"""Linearizability checking of the store's histories with porcupine (``checker``): used by the
simulator's store clients (``kraft-spark sim --store-clients``) and the real-process robustness
test."""

from kraft_spark.lincheck.checker import CheckResult, History, check_history, go_available

__all__ = ["CheckResult", "History", "check_history", "go_available"]
