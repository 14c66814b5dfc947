# The two commands of the README: `make run` and `make test`. Each creates .venv on first use
# and reinstalls when setup.cfg changes, so a fresh clone needs nothing else.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: run test lint bench chaos clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[sftp,websocket,spark,test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/conduit start --demo

# The whole suite, its files shared out to TEST_WORKERS pytest processes (tests/parallel.py says why);
# with PYTEST_ARGS (a file, -k ...), one pytest process runs just that. gevent patches the standard
# library before pytest imports anything, as gunicorn's worker does. Four processes on two cores:
# most of a file's time is spent waiting on servers and browsers (on 2026-12-03, from fresh clones
# on this 2-core machine: 924 s with 4, 1,431 s of CPU; 1,211 s with 3, 1,328 s of CPU, though other
# tests shared the machine during that run).
TEST_WORKERS ?= 4
test: $(STAMP)
ifeq ($(strip $(PYTEST_ARGS)),)
	$(PY) tests/parallel.py --workers $(TEST_WORKERS)
else
	$(PY) -m gevent.monkey --module pytest $(PYTEST_ARGS)
endif

# The long fault harness: 20 SIGKILLs under load, the database outage, subscriber isolation, six cuts
# of the delivering host of a three-host cluster (one in `make test`), and a server killed in the
# middle of a CSV of 100,000 rows (20,000 in `make test`); then the tests marked `chaos`, which
# `make test` skips: the benchmarks' longest smoke runs and the API fuzzing on SQLite.
chaos: $(STAMP)
	CONDUIT_CHAOS=1 CONDUIT_CHAOS_KILLS=20 CONDUIT_CHAOS_CLUSTER_CUTS=6 $(PY) -m gevent.monkey --module pytest -q -s tests/reliability
	CONDUIT_CHAOS_FILE_ROWS=100000 $(PY) -m gevent.monkey --module pytest -q -s \
		tests/files/test_transfer_live.py -k kill_9
	CONDUIT_CHAOS=1 $(PY) -m gevent.monkey --module pytest -q -m chaos tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The peers (Celery, Dramatiq), profilers, the HTTP load generator (wrk) and valgrind (Debian packages)
# that only the benchmarks need.
$(BENCH_STAMP): $(STAMP) setup.cfg
	$(PY) -m pip install --quiet -e '.[sftp,websocket,spark,test,bench]'
	command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; } \
		|| { echo 'wrk is needed for the REST benchmark: apt-get install wrk' >&2; exit 1; }
	command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; } \
		|| { echo 'valgrind is needed to count instructions per message: apt-get install valgrind' >&2; exit 1; }
	touch $(BENCH_STAMP)

# Every performance target with its figure, side by side with Celery and Dramatiq; writes bench/RESULTS.md.
bench: $(BENCH_STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var/*.db var/*.db-* var/*.pid
