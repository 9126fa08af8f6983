# The two set-up commands (README, first section):
#   make run    install into .venv and start the broker on the embedded defaults
#   make test   install into .venv (with the test extras) and run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-test
RUN_STAMP = $(VENV)/.installed
NATIVE  = $(wildcard native/*.c native/*.h native/bench/*.c native/lifeline/*.c)
# nsqjs for the client-compatibility tests (tests/compat/js): pinned by package-lock.json
JS_DIR   = tests/compat/js
JS_STAMP = $(JS_DIR)/node_modules/.installed
# Etsy's statsd daemon for the statsd push tests (tests/metrics/statsd): pinned likewise
STATSD_DIR   = tests/metrics/statsd
STATSD_STAMP = $(STATSD_DIR)/node_modules/.installed

.PHONY: run test test-fast bench example-config clean

# what the test suite drives for real, from Debian's packages: systemd-analyze (the unit),
# chromium + chromium-driver (the admin UI), prometheus (scraping /metrics), podman, buildah,
# debootstrap and runc (building and running deploy/Dockerfile)
TEST_DEBS = systemd chromium chromium-driver prometheus podman buildah debootstrap runc

# `make run`: the broker's own dependencies only (a 60 MB venv; with the test extras: 890 MB)
$(RUN_STAMP): pyproject.toml setup.py $(NATIVE)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# `make test`: the test extras and the Debian packages above (installed when run as root)
$(STAMP): $(RUN_STAMP)
	@missing=$$(for p in $(TEST_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	        apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	    else echo "warning: missing Debian packages (apt-get install $$missing): tests that drive them will fail"; fi; fi
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

$(JS_STAMP): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && npm ci --no-audit --no-fund
	touch $@

$(STATSD_STAMP): $(STATSD_DIR)/package.json $(STATSD_DIR)/package-lock.json
	cd $(STATSD_DIR) && npm ci --no-audit --no-fund
	touch $@

run: $(RUN_STAMP)
	$(BIN)/nsqmp serve $(ARGS)

test: $(STAMP) $(JS_STAMP) $(STATSD_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP) $(JS_STAMP) $(STATSD_STAMP)
	$(BIN)/python -m pytest -m 'not slow' $(PYTEST_ARGS)

# side by side with nsqd: make bench NSQD=path/to/nsqd [BENCH_WRITER=... BENCH_READER=...] [BASELINE=dir]
bench: $(STAMP)
	$(BIN)/python -m nsqmp.bench.suite $(if $(NSQD),--nsqd $(NSQD)) \
	  $(if $(BENCH_WRITER),--bench-writer $(BENCH_WRITER)) $(if $(BENCH_READER),--bench-reader $(BENCH_READER)) \
	  $(if $(BASELINE),--baseline $(BASELINE)) $(ARGS)

example-config: $(RUN_STAMP)
	$(BIN)/python -m nsqmp.config.example > deploy/nsqmp.toml.example

clean:
	rm -rf build *.egg-info nsqmp/_native*.so nsqmp/bench/_client*.so nsqmp/supervisor/_lifeline*.so
