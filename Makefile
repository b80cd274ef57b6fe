# The two set-up commands of the README: `make run` and `make test`. Both create the project's
# virtual environment (.venv) themselves and reinstall it when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint sim-long bench object-store-check docs etcd-protos clean

$(STAMP): pyproject.toml setup.py kraft_spark/log/_fastcodec.c
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The Spark driver's class-data archive (kraft_spark/spark_cds.py): every later Spark start a
# third shorter. Also fetches Delta's jars. A failure only leaves starts slower (and is said).
CDS := $(VENV)/.spark-cds
$(CDS): $(STAMP)
	-$(VENV)/bin/python -m kraft_spark.spark_cds_build
	@touch $(CDS)

run: $(STAMP) $(CDS)
	$(VENV)/bin/kraft-spark run

# The one-sided-cut test drops a leader's answers on loopback with iptables: installed here when
# running as root with apt-get (the test is skipped, with the reason, otherwise). Likewise
# Debian's etcd-client (etcdctl 3.4) and etcd-server (etcd 3.4): tests/etcd drive the nodes'
# etcd API with etcd's own command-line client and compare what it prints against etcd's.
test: $(STAMP) $(CDS)
	@if [ "$$(id -u)" = 0 ] && ! command -v iptables >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's iptables with apt-get (for the one-sided-cut test)"; \
		apt-get install -y -q iptables >/dev/null 2>&1 || echo "iptables could not be installed: the one-sided-cut test will be skipped"; fi
	@if [ "$$(id -u)" = 0 ] && ! { command -v etcdctl && command -v etcd; } >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's etcd-client and etcd-server with apt-get (etcdctl and etcd for tests/etcd)"; \
		apt-get install -y -q etcd-client etcd-server >/dev/null 2>&1 || echo "etcd-client could not be installed: the etcdctl tests will be skipped"; fi
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	# Four workers (pytest-xdist) on this 2-core VM: part of the suite waits on timers and real
	# processes (fresh clone 2026-11-28: 10:17 on four against 11:04 on three; earlier 8:38 on
	# three against 9:09 on two); tests/conftest.py groups the tests that
	# must share one worker (the Spark applications: two groups) and runs the network and API
	# tests on both asyncio's loop and uvloop, the loop of every kraft-spark process (one pass:
	# their uvloop half fills the cores the last Spark tests leave idle). It hands out the longest
	# groups first; --no-loadscope-reorder keeps that order (xdist's own sorts by test count).
	$(VENV)/bin/pytest -m 'not slow' -n 4 --dist loadgroup --no-loadscope-reorder --durations=25

# The inner loop for pure code (tests/ mirrors the packages: raft, sim, protocol, log, state,
# store, client, driver, executors, warehouse, commands, metrics, docs): no Spark, no node
# processes or servers (integration, kafka, lincheck, net, api, bench), none of the simulator's
# long seed campaigns (marked sim). CI runs the full `make test`.
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -m 'not slow and not sim' --durations=10 tests --ignore=tests/spark \
		--ignore=tests/integration --ignore=tests/kafka --ignore=tests/lincheck \
		--ignore=tests/net --ignore=tests/api --ignore=tests/bench

# kraft-spark against etcd and PySyncObj (installs etcd-server and wrk with apt-get if missing);
# writes bench/results/compare-*.{md,json,png} and bench/results/latest.md, then store-*,
# leases-* and etcd-load-*.{md,json} (the last needs Go and the Go module proxy).
bench: $(STAMP)
	$(VENV)/bin/pip install --quiet -e '.[dev,bench]'
	$(VENV)/bin/kraft-spark bench compare
	# The store API (reads by key, compare-and-set, watches) against etcd's.
	$(VENV)/bin/kraft-spark bench store
	# Leases and locks against etcd's: 10,000 leases kept alive by 1,000 clients, and lock
	# throughput under contention (installs etcd-client for etcdctl if missing).
	$(VENV)/bin/kraft-spark bench leases
	# etcd's own load generator (etcd's tools/benchmark, built with go from bench/etcd_benchmark
	# into ~/.cache/kraft-spark/etcd-benchmark the first time) against kraft-spark's etcd API
	# and etcd: put and linearizable range at 1, 16 and 256 clients (bench/results/etcd-load-*).
	$(VENV)/bin/kraft-spark bench etcd-load
	# One short command (kv get, kv put) beside etcdctl's, the --help and the interpreter.
	$(VENV)/bin/kraft-spark bench cli

# The materializer against versitygw (S3) and Azurite (Azure) on loopback, credentials as a Spark
# user writes them; builds versitygw with go and installs Azurite with npm into
# .cache/object-stores the first time. Writes bench/results/object-stores-*.md.
object-store-check: $(STAMP)
	$(VENV)/bin/pip install --quiet -e '.[dev,bench]'
	$(VENV)/bin/python -m bench.object_stores

# The documentation site (docs/, mkdocs.yml) into site/: the reference pages generated from the
# code first, then a strict build (a broken link, a missing page or any warning fails).
docs: $(STAMP)
	$(VENV)/bin/python docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The Python modules of etcd's v3 API, from the .proto files vendored in third_party/etcd
# (committed; tests/etcd/test_protos.py fails when they differ from what this generates).
etcd-protos: $(STAMP)
	$(VENV)/bin/python -m kraft_spark.etcd.pb.generate

sim-long: $(STAMP)
	$(VENV)/bin/kraft-spark sim --seeds 0:2000 --voters 5 --observers 1 --faults all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
